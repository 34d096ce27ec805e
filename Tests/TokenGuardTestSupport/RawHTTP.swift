import Foundation

/// Bytes over a plain TCP connection to 127.0.0.1, for requests no HTTP client library would send
/// (a Content-Length that lies, a body that never comes).
package enum RawHTTP {
    /// Sends `bytes`, then reads until the server closes the connection, `timeout` passes, or what was read so far
    /// satisfies `isComplete`. Returns what was read, the seconds until its first byte (nil: nothing came), and whether
    /// the server closed the connection. With `halfClose`, the client's end of input follows the bytes at once
    /// (`shutdown(SHUT_WR)`).
    ///
    /// Every exchange here blocks on its socket, so each runs on a thread of its own (``onOwnThread(_:)``).
    package static func exchange(
        port: Int, _ bytes: [UInt8], timeout: Double, halfClose: Bool = false,
        isComplete: @escaping @Sendable (String) -> Bool = { _ in false }
    ) async throws -> (
        response: String, firstByteSeconds: Double?, closed: Bool
    ) {
        try await onOwnThread { try exchangeBlocking(port: port, bytes, timeout: timeout, halfClose: halfClose, isComplete: isComplete) }
    }

    private static func exchangeBlocking(
        port: Int, _ bytes: [UInt8], timeout: Double, halfClose: Bool, isComplete: (String) -> Bool
    ) throws -> (
        response: String, firstByteSeconds: Double?, closed: Bool
    ) {
        guard let fd = connectLoopback(port: port) else { throw RunnerError("connect to 127.0.0.1:\(port) failed") }
        defer { close(fd) }
        let started = Date()
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if halfClose { shutdown(fd, Int32(SHUT_WR)) }
        let (received, firstByte, closed) = readUntilClosed(fd, started: started, timeout: timeout) {
            isComplete(String(decoding: $0, as: UTF8.self))
        }
        return (String(decoding: received, as: UTF8.self), firstByte, closed)
    }

    /// As ``exchange(port:_:timeout:halfClose:isComplete:)``, with the bytes sent in `pieces`, `pause` seconds apart: a
    /// request whose body reaches the server in several reads.
    package static func exchange(
        port: Int, pieces: [[UInt8]], pause: Double, timeout: Double, halfClose: Bool = false,
        isComplete: @escaping @Sendable (String) -> Bool = { _ in false }
    ) async throws -> (response: String, closed: Bool) {
        try await onOwnThread {
            try exchangeBlocking(port: port, pieces: pieces, pause: pause, timeout: timeout, halfClose: halfClose, isComplete: isComplete)
        }
    }

    private static func exchangeBlocking(
        port: Int, pieces: [[UInt8]], pause: Double, timeout: Double, halfClose: Bool, isComplete: (String) -> Bool
    ) throws -> (response: String, closed: Bool) {
        guard let fd = connectLoopback(port: port) else { throw RunnerError("connect to 127.0.0.1:\(port) failed") }
        defer { close(fd) }
        var noDelay: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        for (index, piece) in pieces.enumerated() {
            if index > 0 { usleep(UInt32(pause * 1_000_000)) }
            _ = piece.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        if halfClose { shutdown(fd, Int32(SHUT_WR)) }
        let (received, _, closed) = readUntilClosed(fd, started: Date(), timeout: timeout) { isComplete(String(decoding: $0, as: UTF8.self)) }
        return (String(decoding: received, as: UTF8.self), closed)
    }

    /// As a client that writes its whole request before it reads the answer: `sentAll` is false when a write failed
    /// (the server reset the connection), as such a client would then fail without reading anything.
    package static func sendAllThenRead(port: Int, _ bytes: [UInt8], timeout: Double) async throws -> (
        sentAll: Bool, response: String, closed: Bool
    ) {
        try await onOwnThread { try sendAllThenReadBlocking(port: port, bytes, timeout: timeout) }
    }

    private static func sendAllThenReadBlocking(port: Int, _ bytes: [UInt8], timeout: Double) throws -> (
        sentAll: Bool, response: String, closed: Bool
    ) {
        guard let fd = connectLoopback(port: port) else { throw RunnerError("connect to 127.0.0.1:\(port) failed") }
        defer { close(fd) }
        let started = Date()
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, min(65_536, $0.count - sent), Int32(MSG_NOSIGNAL)) }
            if count <= 0 { break }
            sent += count
        }
        let (received, _, closed) = readUntilClosed(fd, started: started, timeout: timeout)
        return (sent == bytes.count, String(decoding: received, as: UTF8.self), closed)
    }

    /// Sends `bytes` on an open connection (`connectLoopback`), then reads what comes within `timeout` seconds or until
    /// it satisfies `isComplete`: one step of a conversation, for exchanges where the client waits between its parts.
    package static func step(_ fd: Int32, send bytes: [UInt8], timeout: Double, isComplete: @escaping @Sendable (String) -> Bool) async -> String {
        await onOwnThread { stepBlocking(fd, send: bytes, timeout: timeout, isComplete: isComplete) }
    }

    private static func stepBlocking(_ fd: Int32, send bytes: [UInt8], timeout: Double, isComplete: (String) -> Bool) -> String {
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let (received, _, _) = readUntilClosed(fd, started: Date(), timeout: timeout) { isComplete(String(decoding: $0, as: UTF8.self)) }
        return String(decoding: received, as: UTF8.self)
    }

    /// Reads until the peer closes the connection, `timeout` seconds after `started` have passed, or the bytes read
    /// satisfy `isComplete`: the bytes, the seconds from `started` to the first of them, and whether the peer closed.
    private static func readUntilClosed(
        _ fd: Int32, started: Date, timeout: Double, isComplete: ([UInt8]) -> Bool = { _ in false }
    ) -> (
        received: [UInt8], firstByteSeconds: Double?, closed: Bool
    ) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var firstByte: Double? = nil
        while Date().timeIntervalSince(started) < timeout {
            var wait = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 {
                if firstByte == nil { firstByte = Date().timeIntervalSince(started) }
                received.append(contentsOf: buffer[0..<count])
                if isComplete(received) { return (received, firstByte, false) }
            } else if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return (received, firstByte, true)
            }
        }
        return (received, firstByte, false)
    }

    /// A blocking TCP connection to 127.0.0.1:`port`, or nil. The caller closes it.
    /// Sends zeros on `fd` without blocking for as long as the peer takes them, up to `limit` bytes or `seconds`;
    /// returns how many it took. A peer that reads nothing takes only what the kernel's socket buffers hold.
    package static func sendWhileAccepted(_ fd: Int32, upTo limit: Int, seconds: Double) async throws -> Int {
        try await onOwnThread {
            let chunk = [UInt8](repeating: 0, count: 1 << 20)
            let deadline = Date().addingTimeInterval(seconds)
            var sent = 0
            while sent < limit, Date() < deadline {
                let count = chunk.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
                if count > 0 {
                    sent += count
                } else if count < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                    usleep(10_000)
                } else {
                    break
                }
            }
            return sent
        }
    }

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

    /// A parsed HTTP/1.1 response.
    package struct Response: Sendable {
        package let status: Int
        package let headers: [(name: String, value: String)]
        package let body: String

        /// The values of every header named `name` (any case).
        package func values(_ name: String) -> [String] { headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value) }
        package func header(_ name: String) -> String? { values(name).first }
    }

    /// One request with any method, path and headers (duplicates as given), `Connection: close`; the response
    /// parsed, or an error when none came within `timeout`.
    package static func request(
        port: Int, method: String, path: String, headers: [(String, String)] = [], body: [UInt8] = [], timeout: Double = 10
    ) async throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let (text, _, _) = try await exchange(port: port, Array((head + "\r\n").utf8) + body, timeout: timeout)
        return try parse(text)
    }

    package static func parse(_ text: String) throws -> Response {
        guard let end = text.range(of: "\r\n\r\n") else { throw RunnerError("no complete response: \(text.prefix(200))") }
        var lines = text[..<end.lowerBound].components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw RunnerError("bad status line: \(text.prefix(80))") }
        let headers = lines.compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return Response(status: status, headers: headers, body: String(text[end.upperBound...]))
    }
}
