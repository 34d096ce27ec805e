import Foundation
import Synchronization
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// Verifications and forward-auth checks answered in the pipeline (a server pinned to one CPU) give the bytes the
/// router gives (the same binary on two CPUs), for the same requests in the same order.
@Suite(.serialized)
struct VerifyOnTheEventLoopTests {
    static func nonce(_ subject: String) -> String { "pipeline-nonce-\(subject)" }
    static let callerKey = "pipeline-caller-key-0123456789"
    /// Ends a connection after the requests before it: read until the server closes.
    static let closing = Array("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".utf8)

    struct Servers {
        let pipeline: ServerProcess
        let router: ServerProcess
        let key: TestKey
        let workspace: TempWorkspace
        func stop() {
            pipeline.stop()
            router.stop()
        }
    }

    func start(callerKeys: Bool = true) async throws -> Servers {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            replay: { store: memory }
            \(callerKeys ? "server: { caller_keys_env: TG_CALLER_KEYS }" : "")
            providers:
              apple:
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_file: "\(jwks)"
                forward_auth: { claim_headers: {x-user-id: user_id, x-email: email, x-groups: claims.groups} }
              apple_shadow:
                kind: apple
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_file: "\(jwks)"
                replay: false
                forward_auth: { mode: shadow }
            """)
        let environment = ["TG_CALLER_KEYS": Self.callerKey]
        let pipeline = try await ServerProcess(arguments: ["--config", config], environment: environment, cpus: "0", workspace: workspace)
        let router = try await ServerProcess(arguments: ["--config", config], environment: environment, workspace: workspace)
        return Servers(pipeline: pipeline, router: router, key: key, workspace: workspace)
    }

    func token(_ key: TestKey, _ subject: String, keyID: String? = nil) throws -> String {
        // A nonce of its own: the nonce claim is a replay key too.
        var claims = ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: Self.nonce(subject))
        claims.set("sub", .string(subject))
        claims.set("groups", .array([.string("admins"), .string("ops\r\nx-evil: 1")]))
        guard let keyID else { return try key.sign(claims) }
        return try key.sign(claims, keyID: keyID)
    }

    static func request(_ method: String, _ target: String, _ headers: [(String, String)] = [], body: String? = nil, key: Bool = true) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if key { text += "X-Tokenguard-Key: \(callerKey)\r\n" }
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if let body, !headers.contains(where: { $0.0.lowercased() == "transfer-encoding" || $0.0.lowercased() == "content-length" }) {
            text += "Content-Length: \(body.utf8.count)\r\n"
        }
        return Array((text + "\r\n" + (body ?? "")).utf8)
    }

    static func verify(_ token: String, nonce: String?, provider: String = "apple", extra: String = "") -> String {
        "{\"provider\":\"\(provider)\",\"token\":\"\(token)\"\(nonce.map { ",\"nonce\":\"\($0)\"" } ?? "")\(extra)}"
    }

    /// What the server sent on one connection for `bytes` followed by a closing `/healthz`, with `Date` values blanked.
    func exchange(_ server: ServerProcess, _ bytes: [UInt8]) async throws -> String {
        let (text, _, _) = try await RawHTTP.exchange(port: server.port, bytes + Self.closing, timeout: 10, isComplete: Self.endsWithClose)
        return Self.withoutDates(text)
    }

    /// True once the responses in `text` are whole and the last one said `Connection: close` (the server may linger
    /// before it closes).
    static func endsWithClose(_ text: String) -> Bool {
        var rest = Substring(text)
        while let end = rest.range(of: "\r\n\r\n") {
            let head = rest[..<end.lowerBound].lowercased()
            let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }.flatMap {
                Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
            }
            let count = head.hasPrefix("http/1.1 1") ? 0 : length ?? 0
            guard rest[end.upperBound...].utf8.count >= count else { return false }
            rest = Substring(rest[end.upperBound...].utf8.dropFirst(count))
            if head.contains("\r\nconnection: close") && rest.isEmpty { return true }
        }
        return false
    }

    static func withoutDates(_ text: String) -> String {
        text.split(separator: "\r\n", omittingEmptySubsequences: false).map { line in
            line.lowercased().hasPrefix("date: ") ? "date: -" : String(line)
        }.joined(separator: "\r\n")
    }

    static func statuses(_ text: String) -> [Int] {
        text.components(separatedBy: "HTTP/1.1 ").dropFirst().compactMap { Int($0.prefix(3)) }
    }

    func answeredInPipeline(_ server: ServerProcess, _ endpoint: String) async throws -> Int {
        let metrics = String(decoding: try await server.get("/metrics").body, as: UTF8.self)
        let prefix = "tokenguard_answered_in_pipeline_total{endpoint=\"\(endpoint)\"} "
        return metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
    }

    /// Requests of every shape the pipeline answers or hands on, each with fresh tokens.
    func shapes(_ key: TestKey) throws -> [(String, [UInt8])] {
        let valid = try token(key, "001.valid")
        func bearer(_ token: String, _ subject: String) -> [(String, String)] {
            [("Authorization", "Bearer \(token)"), ("X-Tokenguard-Nonce", Self.nonce(subject))]
        }
        return [
            ("verify valid", Self.request("POST", "/v1/verify", body: Self.verify(valid, nonce: Self.nonce("001.valid")))),
            ("verify replayed", Self.request("POST", "/v1/verify", body: Self.verify(valid, nonce: Self.nonce("001.valid")))),
            ("verify wrong nonce", Self.request("POST", "/v1/verify", body: Self.verify(try token(key, "002"), nonce: "other"))),
            ("verify no nonce", Self.request("POST", "/v1/verify", body: Self.verify(try token(key, "003"), nonce: nil))),
            (
                "verify unknown provider",
                Self.request("POST", "/v1/verify", body: Self.verify(try token(key, "004"), nonce: Self.nonce("004"), provider: "\u{212A}apple"))
            ),
            ("verify not JSON", Self.request("POST", "/v1/verify", body: "{")),
            ("verify empty body", Self.request("POST", "/v1/verify", body: "")),
            ("verify garbage token", Self.request("POST", "/v1/verify", body: Self.verify("abc.def", nonce: "x"))),
            (
                "verify explain",
                Self.request("POST", "/v1/verify", body: Self.verify(try token(key, "005"), nonce: Self.nonce("005"), extra: ",\"explain\":true"))
            ),
            (
                "verify unknown kid",
                Self.request("POST", "/v1/verify", body: Self.verify(try token(key, "006", keyID: "not-published"), nonce: Self.nonce("006")))
            ),
            (
                "verify no caller key",
                Self.request("POST", "/v1/verify", body: Self.verify(try token(key, "007"), nonce: Self.nonce("007")), key: false)
            ),
            (
                "verify wrong caller key",
                Self.request(
                    "POST", "/v1/verify", [("X-Tokenguard-Key", "x")], body: Self.verify(try token(key, "008"), nonce: Self.nonce("008")), key: false)
            ),
            (
                "verify two caller keys",
                Self.request(
                    "POST", "/v1/verify", [("X-Tokenguard-Key", Self.callerKey)], body: Self.verify(try token(key, "009"), nonce: Self.nonce("009")))
            ),
            (
                "verify chunked",
                Self.request(
                    "POST", "/v1/verify", [("Transfer-Encoding", "chunked")],
                    body: {
                        let b = Self.verify(try! token(key, "010"), nonce: Self.nonce("010"))
                        return String(b.utf8.count, radix: 16) + "\r\n" + b + "\r\n0\r\n\r\n"
                    }())
            ),
            (
                "verify expect",
                Self.request("POST", "/v1/verify", [("Expect", "100-continue")], body: Self.verify(try token(key, "011"), nonce: Self.nonce("011")))
            ),
            ("verify over the limit", Self.request("POST", "/v1/verify", [("Content-Length", "70000")], body: String(repeating: " ", count: 70_000))),
            ("verify trailing slash", Self.request("POST", "/v1/verify/", body: Self.verify(try token(key, "012"), nonce: Self.nonce("012")))),
            ("verify GET", Self.request("GET", "/v1/verify")),
            ("authz valid", Self.request("GET", "/v1/authz/apple/some/path", bearer(try token(key, "020"), "020"))),
            ("authz valid again (no replay claim)", Self.request("GET", "/v1/authz/apple/some/path", bearer(valid, "001.valid"))),
            ("authz HEAD", Self.request("HEAD", "/v1/authz/apple", bearer(try token(key, "021"), "021"))),
            ("authz POST no body", Self.request("POST", "/v1/authz/apple/x", bearer(try token(key, "022"), "022") + [("Content-Length", "0")])),
            ("authz no token", Self.request("GET", "/v1/authz/apple/x")),
            ("authz forged", Self.request("GET", "/v1/authz/apple/x", bearer(String(valid.dropLast(2)) + "AA", "001.valid"))),
            ("authz shadow", Self.request("GET", "/v1/authz/apple_shadow/x", bearer("abc", "x"))),
            ("authz unknown provider", Self.request("GET", "/v1/authz/nobody/x", bearer(valid, "001.valid"))),
            ("authz empty provider", Self.request("GET", "/v1/authz//x", bearer(valid, "001.valid"))),
            ("authz percent-encoded", Self.request("GET", "/v1/authz/app%6ce/x", bearer(try token(key, "023"), "023"))),
            ("authz query", Self.request("GET", "/v1/authz/apple?x=1", bearer(try token(key, "024"), "024"))),
            ("authz with a body", Self.request("POST", "/v1/authz/apple/x", bearer(try token(key, "025"), "025"), body: "hello")),
            ("authz no caller key", Self.request("GET", "/v1/authz/apple/x", bearer(try token(key, "026"), "026"), key: false)),
            ("authz unknown kid", Self.request("GET", "/v1/authz/apple/x", bearer(try token(key, "027", keyID: "not-published"), "027"))),
        ]
    }

    @Test("each shape alone on a connection: the pipeline's bytes are the router's")
    func sameAnswerEitherPath() async throws {
        let servers = try await start()
        defer { servers.stop() }
        for (label, bytes) in try shapes(servers.key) {
            let fromPipeline = try await exchange(servers.pipeline, bytes)
            let fromRouter = try await exchange(servers.router, bytes)
            if label == "verify explain" {
                // Its checks say how many seconds remain, read a moment apart on the two servers.
                #expect(Self.statuses(fromPipeline) == Self.statuses(fromRouter), "\(label):\n\(fromPipeline)\n---\n\(fromRouter)")
                continue
            }
            #expect(fromPipeline == fromRouter, "\(label):\n\(fromPipeline)\n---\n\(fromRouter)")
            #expect(!Self.statuses(fromPipeline).isEmpty, "\(label): no answer")
        }
        // The pipeline answered its share; the router server (two CPUs) answered none there.
        #expect(try await answeredInPipeline(servers.pipeline, "verify") >= 5)
        #expect(try await answeredInPipeline(servers.pipeline, "forward_auth") >= 6)
        #expect(try await answeredInPipeline(servers.router, "verify") == 0)
        #expect(try await answeredInPipeline(servers.router, "forward_auth") == 0)
    }

    @Test("every shape pipelined on one connection, a malformed request last: the same answers in the same order")
    func pipelinedInOrder() async throws {
        let servers = try await start()
        defer { servers.stop() }
        // Without the shapes that end the connection (a body over the limit, forward-auth with a body), and explain,
        // whose checks say how many seconds remain.
        let shapes = try shapes(servers.key).filter { !["verify over the limit", "authz with a body", "verify explain"].contains($0.0) }
        let healthz = Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8)
        var stream: [UInt8] = []
        for (_, bytes) in shapes { stream += bytes + healthz }
        stream += Array("NOT HTTP AT ALL\r\n\r\n".utf8)
        let fromPipeline = try await exchange(servers.pipeline, stream)
        let fromRouter = try await exchange(servers.router, stream)
        #expect(fromPipeline == fromRouter, "\(fromPipeline)\n---\n\(fromRouter)")
        let statuses = Self.statuses(fromPipeline)
        #expect(statuses.last == 400, "the malformed request is answered last: \(statuses)")
    }

    @Test("one replay store for both paths: a token used in the pipeline is replayed on the router, and the other way")
    func replayAcrossPaths() async throws {
        let servers = try await start()
        defer { servers.stop() }
        let port = servers.pipeline.port
        func split(_ bytes: [UInt8]) -> [[UInt8]] { [Array(bytes[..<(bytes.count - 10)]), Array(bytes[(bytes.count - 10)...]) + Self.closing] }
        /// The first answer's verdict: "valid" or its error code (the closing health check follows it).
        func code(_ text: String) -> String? {
            guard let status = Self.statuses(text).first else { return nil }
            if status == 200 { return text.contains("\"valid\":true") ? "valid" : nil }
            guard let range = text.range(of: "\"code\":\"") else { return nil }
            return String(text[range.upperBound...].prefix { $0 != "\"" })
        }
        let first = Self.request("POST", "/v1/verify", body: Self.verify(try token(servers.key, "030"), nonce: Self.nonce("030")))
        let before = try await answeredInPipeline(servers.pipeline, "verify")
        let firstAnswer = try await exchange(servers.pipeline, first)
        #expect(code(firstAnswer) == "valid", "\(firstAnswer)")
        #expect(try await answeredInPipeline(servers.pipeline, "verify") == before + 1)
        // The same request in two reads goes to the router.
        let (again, _) = try await RawHTTP.exchange(port: port, pieces: split(first), pause: 0.2, timeout: 10)
        #expect(code(again) == "token_replayed")

        let second = Self.request("POST", "/v1/verify", body: Self.verify(try token(servers.key, "031"), nonce: Self.nonce("031")))
        let (routed, _) = try await RawHTTP.exchange(port: port, pieces: split(second), pause: 0.2, timeout: 10)
        #expect(code(routed) == "valid")
        await #expect(code(try exchange(servers.pipeline, second)) == "token_replayed")
        // At least the two whole requests (a split request whose pieces a stalled server read together is answered
        // here too, with the same verdict).
        #expect(try await answeredInPipeline(servers.pipeline, "verify") >= before + 2)
    }

    @Test("a client that sends 1,500 verifications before reading: every answer, in order, whether written here or by the router")
    func clientNotReading() async throws {
        let servers = try await start(callerKeys: false)
        defer { servers.stop() }
        let token = try token(servers.key, "040")
        let valid = Self.request("POST", "/v1/verify", body: Self.verify(token, nonce: Self.nonce("040")), key: false)
        let count = 1_500
        var stream: [UInt8] = []
        for index in 0..<count {
            // Every 100th is a health check: its place in the answers shows the order was kept.
            stream += index % 100 == 99 ? Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8) : valid
        }
        stream += Self.closing
        let bytes = stream
        guard let fd = RawHTTP.connectLoopback(port: servers.pipeline.port) else { throw RunnerError("connect failed") }
        defer { close(fd) }
        // The writer runs beside the reader: the server stops reading while its answers are not read, and a client
        // that only wrote would wait on it for ever.
        let writer = Thread {
            var sent = 0
            while sent < bytes.count {
                let written = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, min(16_384, $0.count - sent), Int32(MSG_NOSIGNAL)) }
                if written <= 0 { return }
                sent += written
            }
        }
        writer.start()
        // Nothing read for a while: the answers back up in the socket.
        try await Task.sleep(for: .milliseconds(500))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var wait = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let read = recv(fd, &buffer, buffer.count, 0)
            if read > 0 {
                received += buffer[0..<read]
            } else if read == 0 || (errno != EAGAIN && errno != EINTR) {
                break
            }
        }
        let text = String(decoding: received, as: UTF8.self)
        let statuses = Self.statuses(text)
        #expect(statuses.count == count + 1)
        let expected = (0..<count).map { $0 == 0 ? 200 : $0 % 100 == 99 ? 200 : 401 } + [200]
        let inOrder = statuses == expected
        #expect(inOrder, "first differing answer at \(Array(zip(statuses, expected)).firstIndex { $0 != $1 } ?? -1) of \(statuses.count)")
        // Health checks sit where they were sent: the 401s (token_replayed) between them are verify answers.
        let bodies = text.components(separatedBy: "\r\n\r\n").filter { $0.hasPrefix("{") }
        #expect(bodies.filter { $0.contains("token_replayed") }.count == count - count / 100 - 1)
    }

    @Test("SIGTERM with a kept-alive connection whose requests were answered in the pipeline: the server exits at once")
    func shutdownAfterPipelineAnswers() async throws {
        let servers = try await start(callerKeys: false)
        defer { servers.stop() }
        guard let fd = RawHTTP.connectLoopback(port: servers.pipeline.port) else { throw RunnerError("connect failed") }
        defer { close(fd) }
        let bytes = Self.request("POST", "/v1/verify", body: Self.verify(try token(servers.key, "050"), nonce: Self.nonce("050")), key: false)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var buffer = [UInt8](repeating: 0, count: 8192)
        var wait = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        let read = recv(fd, &buffer, buffer.count, 0)
        #expect(read > 0 && String(decoding: buffer[0..<max(read, 0)], as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(try await answeredInPipeline(servers.pipeline, "verify") == 1)
        let started = Date()
        let status = await servers.pipeline.terminate(timeout: 15)
        #expect(status == 0, "exit status \(String(describing: status))")
        #expect(Date().timeIntervalSince(started) < 10, "the idle connection held the shutdown")
    }
}
