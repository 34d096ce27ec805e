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
    var headerReader = ResponseHeaderReader()
    var headers: [(String, String)] { headerReader.headers }
    var exceeded = false
    /// Why the header reader aborted the transfer (too many lines, a line it cannot read): the reply is refused
    /// rather than read with some of it left out (a dropped `Cache-Control: no-store` would mean the longest TTL).
    var headerRefusal: ResponseHeaderReader.Refusal?

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

/// libcurl's header callback: one header line per call, read by ``ResponseHeaderReader``.
let curlHeaderCallback: curl_write_callback = { data, size, count, userdata in
    guard let data = unsafe data, let userdata = unsafe userdata else { return 0 }
    let state = unsafe Unmanaged<TransferState>.fromOpaque(userdata).takeUnretainedValue()
    let total = size * count
    let read = unsafe data.withMemoryRebound(to: UInt8.self, capacity: total) {
        unsafe state.headerReader.read(line: UnsafeBufferPointer(start: $0, count: total))
    }
    guard case .failure(let refusal) = read else { return total }
    state.headerRefusal = refusal
    return 0
}
