import Foundation
import Synchronization
import TokenGuardSync
import TokenGuardTestSupport

/// Plain TCP connections to the server that misbehave on purpose: they send part of a request and then
/// drip or stall. Each records when the server answered or closed it.
final class RawConnections: @unchecked Sendable {
    // @unchecked Sendable: the fds are written by the opening thread, then only read; closedAt is under a lock.
    private(set) var fds: [Int32] = []
    private let openedAt: Double
    let closedAt = Locked<[Int32: Double]>([:])

    /// Opens up to `count` connections to 127.0.0.1:`port`, each sending `prefix` at once.
    init(port: Int, count: Int, prefix: [UInt8]) {
        openedAt = monotonicSeconds()
        for _ in 0..<count {
            guard let fd = RawHTTP.connectLoopback(port: port) else { break }
            if !prefix.isEmpty { _ = prefix.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
            fds.append(fd)
        }
    }

    /// Sends one byte on every connection still open, and notes the ones the server has answered or closed.
    func drip(_ byte: UInt8) {
        for fd in fds where closedAt.withLock({ $0[fd] == nil }) {
            var value = byte
            if send(fd, &value, 1, Int32(MSG_NOSIGNAL)) < 0 { markClosed(fd) }
        }
        poll()
    }

    /// Notes connections the server has answered (any bytes back) or closed, without blocking.
    func poll() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        for fd in fds where closedAt.withLock({ $0[fd] == nil }) {
            let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 || count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) { markClosed(fd) }
        }
    }

    private func markClosed(_ fd: Int32) {
        let now = monotonicSeconds()
        closedAt.withLock { if $0[fd] == nil { $0[fd] = now } }
    }

    var opened: Int { fds.count }
    var cutOff: Int { closedAt.withLock { $0.count } }
    /// Seconds from opening to the server's answer or close, for the connections it cut off.
    var secondsToCutOff: [Double] { closedAt.withLock { $0.values.map { $0 - openedAt } } }

    func closeAll() {
        for fd in fds { close(fd) }
        fds = []
    }

    deinit { closeAll() }
}
