import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// The binary fetching keys from a local IdP over HTTP, with its key archive.
struct CLIFetchTests {
    @Test("verify and batch fetch keys from jwks_url; the archive lets --at verify a token whose key was rotated out")
    func fetchAndArchive() async throws {
        let nonce = "cli-fetch-nonce"
        let old = try SharedTestKeys.rsa()
        let new = try SharedTestKeys.key("rsa-rotated", .rsa(bits: 2048))
        let published = IdPKeys(try SharedTestKeys.jwks([old]))
        let server = try FakeHTTPServer { _ in .json(published.value) }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            key_archive: "keys.sqlite"
            http: { connect_timeout_ms: 5000, timeout_ms: 5000 }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_url: "\(server.baseURL)/jwks", dev_idp: true }
            """)
        let now = Int64(Date().timeIntervalSince1970)
        let token = try old.sign(ProviderTokens.apple(now: now - 60, rawNonce: nonce))
        let first = try await BinaryRunner.run(["verify", "--config", config, "--provider", "apple", "--token", token, "--nonce", nonce])
        #expect(first.status == 0, "\(first.stdout) \(first.stderr)")
        #expect(server.count("/jwks") == 1)
        #expect(FileManager.default.fileExists(atPath: workspace.url.appendingPathComponent("keys.sqlite").path))

        // The IdP rotates: the old key is gone from the JWKS.
        published.value = try SharedTestKeys.jwks([new])
        let current = try await BinaryRunner.run(["verify", "--config", config, "--provider", "apple", "--token", token, "--nonce", nonce])
        #expect(current.status == 1)
        #expect(current.stdout.contains("unknown_key"))
        let historical = try await BinaryRunner.run(
            ["verify", "--config", config, "--provider", "apple", "--token", token, "--nonce", nonce, "--at", String(now)])
        #expect(historical.status == 0, "archived key used for a logged token: \(historical.stdout)")

        // Batch: keys fetched once up front.
        let before = server.count("/jwks")
        let newToken = try new.sign(ProviderTokens.apple(now: now - 60, rawNonce: nonce))
        let lines = (0..<50).map { "{\"id\":\($0),\"provider\":\"apple\",\"token\":\"\(newToken)\",\"nonce\":\"\(nonce)\"}" }.joined(separator: "\n")
        let batch = try await BinaryRunner.run(["batch", "--config", config, "-"], stdin: lines)
        #expect(batch.status == 0, "\(batch.stderr)")
        #expect(batch.stdout.split(separator: "\n").count == 50)
        #expect(!batch.stdout.contains("\"valid\":false"))
        #expect(server.count("/jwks") == before + 1)

        // IdP down and no archive of the key: keys_unavailable, exit 3 — never a rejection.
        server.stop()
        let other = try TestKey(.rsa(bits: 2048), keyID: "never-seen")
        let down = try await BinaryRunner.run(
            [
                "verify", "--config", config, "--provider", "apple", "--token", try other.sign(ProviderTokens.apple(now: now, rawNonce: nonce)),
                "--nonce", nonce,
            ])
        #expect(down.status == 3, "\(down.stdout) \(down.stderr)")
    }
}

/// The JWKS text the fake IdP serves, changed by the test.
final class IdPKeys: @unchecked Sendable {
    // @unchecked Sendable: guarded by the lock.
    private let lock = NSLock()
    private var text: String
    init(_ text: String) { self.text = text }
    var value: String {
        get { lock.withLock { text } }
        set { lock.withLock { text = newValue } }
    }
}
