import Foundation
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

/// `tokenguard serve --demo`, the README's first command: offline, its printed commands do what they say.
struct DemoE2ETests {
    /// The JSON bodies of the printed `curl … /v1/verify … -d '…'` commands, in order.
    static func verifyBodies(in log: String) -> [String] {
        log.split(separator: "\n").compactMap { line in
            guard line.contains("/v1/verify"), let start = line.range(of: "-d '"), let end = line.range(of: "'", options: .backwards),
                start.upperBound < end.lowerBound
            else { return nil }
            return String(line[start.upperBound..<end.lowerBound])
        }
    }

    @Test("serve --demo: the printed token verifies (200), the altered one is refused (401), and the start logs no failed fetch")
    func demo() async throws {
        let workspace = try TempWorkspace()
        let server = try await ServerProcess(arguments: ["--demo"], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        let bodies = Self.verifyBodies(in: server.log())
        try #require(bodies.count == 2, "\(server.log())")
        let valid = try await server.post("/v1/verify", bodies[0])
        let validText = String(decoding: valid.body, as: UTF8.self)
        #expect(valid.status == 200 && validText.contains(#""valid":true"#), "\(valid.status) \(validText)")
        let altered = try await server.post("/v1/verify", bodies[1])
        let alteredText = String(decoding: altered.body, as: UTF8.self)
        #expect(altered.status == 401 && alteredText.contains("invalid_signature"), "\(altered.status) \(alteredText)")
        // The embedded IdP listens before the first fetch: a demo's first lines must not report an outage.
        #expect(!server.log().contains("fetch failed"), "\(server.log())")
    }

    @Test("methods: HEAD answers wherever GET does, with no body; other methods on a known path are 405 with Allow, as the router reads the path")
    func methods() async throws {
        let workspace = try TempWorkspace()
        let server = try await ServerProcess(arguments: ["--demo"], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        let get = try await RawHTTP.request(port: server.port, method: "GET", path: "/healthz")
        let head = try await RawHTTP.request(port: server.port, method: "HEAD", path: "/healthz")
        #expect(get.status == 200 && head.status == 200 && head.body.isEmpty, "\(head.status) \(head.body)")
        #expect(head.header("content-type") == get.header("content-type"))
        let revocation = "/v1/revocations?provider=apple&subject=head-check"
        #expect(try await RawHTTP.request(port: server.port, method: "HEAD", path: revocation).status == 404)
        let recorded = try await RawHTTP.request(
            port: server.port, method: "POST", path: "/v1/revocations", headers: [("Content-Type", "application/json"), ("Content-Length", "43")],
            body: Array(#"{"provider":"apple","subject":"head-check"}"#.utf8))
        #expect(recorded.status == 200, "\(recorded.body)")
        let found = try await RawHTTP.request(port: server.port, method: "HEAD", path: revocation)
        #expect(found.status == 200 && found.body.isEmpty, "\(found.status) \(found.body)")
        for (method, path, allow) in [
            ("PUT", "/v1/revocations", "GET, HEAD, POST, DELETE"), ("GET", "/v1/notifications/apple", "POST"),
            ("TRACE", "//v1/notifications/apple", "POST"), ("GET", "/v1/notifications/apple/", "POST"), ("GET", "//v1//verify/", "POST"),
            ("DELETE", "/healthz", "GET, HEAD"),
        ] {
            let answer = try await RawHTTP.request(port: server.port, method: method, path: path)
            #expect(answer.status == 405 && answer.header("allow") == allow, "\(method) \(path): \(answer.status) \(answer.headers)")
        }
        // No provider segment, or two: not a notification path.
        #expect(try await RawHTTP.request(port: server.port, method: "GET", path: "/v1/notifications/").status == 404)
        #expect(try await RawHTTP.request(port: server.port, method: "GET", path: "/v1/notifications/apple/x").status == 404)
    }
}
