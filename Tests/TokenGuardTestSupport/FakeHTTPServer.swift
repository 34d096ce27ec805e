import Foundation
import Synchronization
import TokenGuardSync

#if canImport(Glibc)
    import Glibc
#endif

/// A small real HTTP/1.1 server on 127.0.0.1 (a port of its own) that plays an identity provider in tests:
/// each request is answered by a handler the test sets, and requests are counted per path.
/// One thread per connection, `Connection: close`; bounded reads. Stopped explicitly or when released.
package final class FakeHTTPServer: @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind Mutexes; the listening descriptor is set once in init.
    package struct Request: Sendable {
        package let method: String
        package let path: String
        package let headers: [String: String]
        package let body: [UInt8]
        /// Every header line as received, duplicates included (`headers` keeps the last of each name).
        package let headerLines: [String]

        /// How many times a header named `name` (any case) was received.
        package func occurrences(of name: String) -> Int {
            headerLines.filter { $0.prefix { $0 != ":" }.lowercased() == name.lowercased() }.count
        }
    }

    package struct Response: Sendable {
        package var status: Int
        package var headers: [(String, String)]
        package var body: [UInt8]
        /// Seconds to wait before answering (a slow IdP).
        package var delay: Double
        /// When set, sent verbatim in place of the status line and headers (ending with the empty line), then `body`:
        /// for replies no well-behaved server would write (a folded first header line, a bare CR).
        package var rawHead: [UInt8]?

        package init(status: Int = 200, headers: [(String, String)] = [], body: [UInt8] = [], delay: Double = 0, rawHead: [UInt8]? = nil) {
            self.rawHead = rawHead
            self.status = status
            self.headers = headers
            self.body = body
            self.delay = delay
        }

        package static func json(_ text: String, status: Int = 200, headers: [(String, String)] = []) -> Response {
            Response(status: status, headers: [("Content-Type", "application/json")] + headers, body: Array(text.utf8))
        }
    }

    package typealias Handler = @Sendable (Request) -> Response

    package let port: Int
    private let listener: Int32
    private let handler: Locked<Handler>
    private let counts = Locked<[String: Int]>([:])
    private let running = Locked(true)

    package var baseURL: String { "http://127.0.0.1:\(port)" }

    package init(handler: @escaping Handler = { _ in Response(status: 404) }) throws {
        self.handler = Locked(handler)
        (listener, port) = try Self.listenOnUnusedPort()
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    deinit { stop() }

    /// A listening socket on a port of 127.0.0.1 this test process has never used (``FreeLoopbackPort/claim(_:)``).
    /// Ports the kernel offers that were used before stay bound until the search ends, so it offers others.
    private static func listenOnUnusedPort() throws -> (Int32, Int) {
        var refused: [Int32] = []
        defer { for fd in refused { close(fd) } }
        for _ in 0..<64 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw RunnerError("socket failed") }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = 0
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
            }
            guard bound else {
                close(fd)
                throw RunnerError("bind on 127.0.0.1 failed")
            }
            let port = Int(UInt16(bigEndian: address.sin_port))
            guard FreeLoopbackPort.claim(port) else {
                refused.append(fd)
                continue
            }
            guard listen(fd, 512) == 0 else {
                close(fd)
                throw RunnerError("listen on 127.0.0.1 failed")
            }
            return (fd, port)
        }
        throw RunnerError("no loopback port left that this test process has not used")
    }

    /// Replaces the handler (e.g. to rotate keys or start failing).
    package func respond(_ handler: @escaping Handler) { self.handler.withLock { $0 = handler } }

    /// Requests received for `path` so far.
    package func count(_ path: String) -> Int { counts.withLock { $0[path, default: 0] } }

    package func stop() {
        let wasRunning = running.withLock { running in
            defer { running = false }
            return running
        }
        guard wasRunning else { return }
        // Only shut down: the accept loop closes the descriptor when it leaves. Closed here, its number could be
        // reused by another test's new listener before the loop's next accept, which would then serve that test.
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func acceptLoop() {
        defer { close(listener) }
        while running.withLock({ $0 }) {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                return
            }
            let thread = Thread { [self] in serve(connection) }
            thread.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 16_384)
        var headerEnd: Int? = nil
        while headerEnd == nil, buffer.count < 65_536 {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { return }
            buffer.append(contentsOf: chunk[0..<count])
            headerEnd = Self.find([13, 10, 13, 10], in: buffer)
        }
        guard let headerEnd else { return }
        let head = String(decoding: buffer[0..<headerEnd], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(buffer[(headerEnd + 4)...])
        let expected = min(Int(headers["content-length"] ?? "0") ?? 0, 4 << 20)
        while body.count < expected {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { break }
            body.append(contentsOf: chunk[0..<count])
        }
        let target = String(requestLine[1])
        let path = String(target.prefix { $0 != "?" })
        counts.withLock { $0[path, default: 0] += 1 }
        let request = Request(method: String(requestLine[0]), path: target, headers: headers, body: body, headerLines: lines)
        let response = handler.withLock { $0 }(request)
        if response.delay > 0 { usleep(UInt32(response.delay * 1_000_000)) }
        var out = "HTTP/1.1 \(response.status) Status\r\nContent-Length: \(response.body.count)\r\nConnection: close\r\n"
        for (name, value) in response.headers { out += "\(name): \(value)\r\n" }
        out += "\r\n"
        let bytes = (response.rawHead ?? Array(out.utf8)) + response.body
        var sent = 0
        while sent < bytes.count {
            // MSG_NOSIGNAL: a client that gave up (a timeout test) must not kill the test process with SIGPIPE.
            let count = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return }
            sent += count
        }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for index in 0...(haystack.count - needle.count) where haystack[index..<(index + needle.count)].elementsEqual(needle) { return index }
        return nil
    }
}
