import Foundation

/// Bytes over a plain TCP connection to 127.0.0.1, for requests no HTTP client library would send
/// (a Content-Length that lies, a body that never comes).
package enum RawHTTP {
    /// Sends `bytes`, then reads until the server closes the connection or `timeout` passes. Returns what was
    /// read, the seconds until its first byte (nil: nothing came), and whether the server closed the connection.
    package static func exchange(port: Int, _ bytes: [UInt8], timeout: Double) throws -> (response: String, firstByteSeconds: Double?, closed: Bool) {
        guard let fd = connectLoopback(port: port) else { throw RunnerError("connect to 127.0.0.1:\(port) failed") }
        defer { close(fd) }
        let started = Date()
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var firstByte: Double? = nil
        var closed = false
        while Date().timeIntervalSince(started) < timeout {
            var wait = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 {
                if firstByte == nil { firstByte = Date().timeIntervalSince(started) }
                received.append(contentsOf: buffer[0..<count])
            } else if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                closed = true
                break
            }
        }
        return (String(decoding: received, as: UTF8.self), firstByte, closed)
    }

    /// A blocking TCP connection to 127.0.0.1:`port`, or nil. The caller closes it.
    package static func connectLoopback(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }
}
