import CCurl
import TokenGuardCore
import TokenGuardService

/// Collects one transfer's headers and body, enforcing the size limit as bytes arrive.
final class TransferState {
    let maximumBytes: Int
    var body: [UInt8] = []
    var headers: [(String, String)] = []
    var exceeded = false
    /// More header lines than ``maximumHeaders``: the transfer was aborted rather than read with some left out (a
    /// dropped `Cache-Control: no-store` would mean the longest TTL).
    var tooManyHeaders = false
    static let maximumHeaders = 200

    init(maximumBytes: Int) { self.maximumBytes = maximumBytes }
}

/// libcurl's write callback: appends to the body, or aborts the transfer (by returning a short count) once the
/// response would exceed the limit, so an oversized document is never held in memory.
let curlWriteCallback: curl_write_callback = { data, size, count, userdata in
    guard let data = unsafe data, let userdata = unsafe userdata else { return 0 }
    let state = unsafe Unmanaged<TransferState>.fromOpaque(userdata).takeUnretainedValue()
    let total = size * count
    if state.body.count + total > state.maximumBytes {
        state.exceeded = true
        return 0
    }
    unsafe data.withMemoryRebound(to: UInt8.self, capacity: total) { bytes in
        unsafe state.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: total))
    }
    return total
}

/// libcurl's header callback: one header line per call. A status line starts a new response (after a redirect).
let curlHeaderCallback: curl_write_callback = { data, size, count, userdata in
    guard let data = unsafe data, let userdata = unsafe userdata else { return 0 }
    let state = unsafe Unmanaged<TransferState>.fromOpaque(userdata).takeUnretainedValue()
    let total = size * count
    let line = unsafe data.withMemoryRebound(to: UInt8.self, capacity: total) { bytes in
        unsafe String(decoding: UnsafeBufferPointer(start: bytes, count: total), as: UTF8.self)
    }
    if line.hasPrefix("HTTP/") {
        state.headers.removeAll()
    } else if let colon = line.firstIndex(of: ":") {
        guard state.headers.count < TransferState.maximumHeaders else {
            state.tooManyHeaders = true
            return 0
        }
        let name = ASCII.lowercased(String(line[..<colon]))
        let value = line[line.index(after: colon)...].trimmingWhitespace()
        state.headers.append((name, value))
    }
    return total
}

extension Substring {
    func trimmingWhitespace() -> String {
        // Character.isWhitespace also covers "\r\n", which Swift treats as a single Character.
        let isSpace: (Character) -> Bool = { $0.isWhitespace }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[start...end])
    }
}
