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
}
