import CCurl
import Synchronization
import TokenGuardCore
import TokenGuardService

/// Set when the task awaiting a transfer is cancelled (a shutdown, a request answered by its timeout): the transfer
/// stops within about a second instead of holding a worker thread, and its caller, until the outbound timeout.
final class TransferCancellation: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

/// Collects one transfer's headers and body, enforcing the size limit as bytes arrive.
final class TransferState {
    let maximumBytes: Int
    let cancellation: TransferCancellation
    var body: [UInt8] = []
    var headers: [(String, String)] = []
    var exceeded = false
    /// More header lines than ``maximumHeaders``: the transfer was aborted rather than read with some left out (a
    /// dropped `Cache-Control: no-store` would mean the longest TTL).
    var tooManyHeaders = false
    /// True until the final (non-1xx) response's status line: only a status line of a new header block, while no final
    /// status has been seen, starts the headers afresh (a header line `HTTP/x: y` must not wipe those read before).
    var awaitingFinalStatus = true
    var atHeaderBlockStart = true
    static let maximumHeaders = 200

    init(maximumBytes: Int, cancellation: TransferCancellation) {
        self.maximumBytes = maximumBytes
        self.cancellation = cancellation
    }
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

/// libcurl's progress callback (at least once a second, even while nothing arrives): a non-zero return aborts the
/// transfer with `CURLE_ABORTED_BY_CALLBACK`.
let curlProgressCallback: curl_xferinfo_callback = { userdata, _, _, _, _ in
    guard let userdata = unsafe userdata else { return 0 }
    return unsafe Unmanaged<TransferState>.fromOpaque(userdata).takeUnretainedValue().cancellation.isSet ? 1 : 0
}

/// libcurl's header callback: one header line per call. A status line starts a response's header block (an interim
/// 1xx response's comes first); a line starting with a space or tab continues the previous header (obsolete line
/// folding, read as a space: RFC 9112 §5.2); a name is read without the whitespace around it.
let curlHeaderCallback: curl_write_callback = { data, size, count, userdata in
    guard let data = unsafe data, let userdata = unsafe userdata else { return 0 }
    let state = unsafe Unmanaged<TransferState>.fromOpaque(userdata).takeUnretainedValue()
    let total = size * count
    let bytes = unsafe data.withMemoryRebound(to: UInt8.self, capacity: total) { unsafe Array(UnsafeBufferPointer(start: $0, count: total)) }
    let line = String(decoding: bytes, as: UTF8.self)
    let startsBlock = state.atHeaderBlockStart
    state.atHeaderBlockStart = line == "\r\n" || line == "\n"
    if state.atHeaderBlockStart { return total }
    if startsBlock && state.awaitingFinalStatus && line.hasPrefix("HTTP/") {
        state.headers.removeAll()
        let status = line.split(separator: " ", maxSplits: 2).dropFirst().first
        state.awaitingFinalStatus = status?.first == "1"
        return total
    }
    if let first = bytes.first, first == 0x20 || first == 0x09 {
        if let last = state.headers.indices.last {
            state.headers[last].1 += " " + line[...].trimmingWhitespace()
        }
    } else if let colon = line.firstIndex(of: ":") {
        guard state.headers.count < TransferState.maximumHeaders else {
            state.tooManyHeaders = true
            return 0
        }
        let name = ASCII.lowercased(line[..<colon].trimmingWhitespace())
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
