import Foundation
import Testing
import TokenGuardCore
import TokenGuardFetch
import TokenGuardService
import TokenGuardTestSupport

/// The developer IdP, `mint`, `inspect`, and a request timeout, through the real binary.
struct DevIdPTests {
    @Test("dev-idp serves a JWKS on loopback; minted tokens verify only where the dev IdP is explicitly trusted")
    func devIdPEndToEnd() async throws {
        let workspace = try TempWorkspace()
        let stateDir = workspace.url.appendingPathComponent("idp").path
        let port = try FreeLoopbackPort.pick()
        let idp = try await DevIdPProcess(stateDir: stateDir, port: port)
        defer { idp.stop() }
        #expect(idp.jwks?.status == 200)

        let mint = try await BinaryRunner.run(["mint", "--provider", "apple", "--nonce", "raw-1", "--state-dir", stateDir])
        #expect(mint.status == 0)
        let token = mint.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let trusted = try workspace.write(
            "trusted.yaml", "providers:\n  apple: { audiences: [\"com.example.app\"], jwks_url: \"http://127.0.0.1:\(port)/jwks\", dev_idp: true }\n")
        let valid = try await BinaryRunner.run(["verify", "--config", trusted, "--provider", "apple", "--token", token, "--nonce", "raw-1"])
        #expect(valid.status == 0, "\(valid.stdout) \(valid.stderr)")
        // Not trusted without the explicit entry.
        let untrusted = try workspace.write(
            "untrusted.yaml", "providers:\n  apple: { audiences: [\"com.example.app\"], jwks_url: \"http://127.0.0.1:\(port)/jwks\" }\n")
        let refused = try await BinaryRunner.run(["verify", "--config", untrusted, "--provider", "apple", "--token", token, "--nonce", "raw-1"])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("dev_idp"))
        // Microsoft and Facebook shapes verify under their policies too.
        for (kind, audience) in [("microsoft", "11111111-2222-4333-8444-555555555555"), ("facebook_limited", "1234567890")] {
            let minted = try await BinaryRunner.run(["mint", "--provider", kind, "--nonce", "n-2", "--state-dir", stateDir])
            let config = try workspace.write(
                "\(kind).yaml",
                "providers:\n  \(kind): { audiences: [\"\(audience)\"], jwks_url: \"http://127.0.0.1:\(port)/jwks\", dev_idp: true\(kind == "microsoft" ? ", tenants: [\"*\"]" : "") }\n"
            )
            let result = try await BinaryRunner.run(
                [
                    "verify", "--config", config, "--provider", kind, "--token", minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines),
                    "--nonce", "n-2",
                ])
            #expect(result.status == 0, "\(kind): \(result.stdout)")
        }
    }

    @Test("dev-idp refuses to listen beyond loopback")
    func loopbackOnly() async throws {
        for address in ["0.0.0.0:9090", "10.1.2.3:9090", "example.com:9090"] {
            let result = try await BinaryRunner.run(["dev-idp", "--listen", address, "--state-dir", "/tmp/tokenguard-never-created"])
            #expect(result.status == 2, "\(address)")
            #expect(result.stderr.contains("loopback"))
        }
    }

    @Test("inspect decodes under an UNVERIFIED banner")
    func inspect() async throws {
        let token = try SharedTestKeys.rsa().sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: nil))
        let result = try await BinaryRunner.run(["inspect", token])
        #expect(result.status == 0)
        #expect(result.stdout.hasPrefix(String(repeating: "!", count: 72) + "\n!!! UNVERIFIED"))
        #expect(result.stdout.contains("\"iss\":\"https://appleid.apple.com\""))
        #expect(try await BinaryRunner.run(["inspect", "not-a-token"]).status == 1)
    }

    @Test("a request not answered within server.request_timeout_seconds gets 503")
    func requestTimeout() async throws {
        let key = try SharedTestKeys.rsa()
        let jwks = try SharedTestKeys.jwks([key])
        // The IdP answers after 600 s, far beyond the 1 s request timeout and beyond any server start: with 30 s, one
        // loaded full run had the keys in hand before the request was sent, and the token verified.
        let idp = try FakeHTTPServer { _ in FakeHTTPServer.Response(body: Array(jwks.utf8), delay: 600) }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            http: { timeout_ms: 60000 }
            server: { request_timeout_seconds: 1 }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_url: "\(idp.baseURL)/jwks", dev_idp: true }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "n"))
        let started = ContinuousClock.now
        let response = try await server.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"n\"}")
        #expect(response.status == 503)
        #expect(response.header("retry-after") != nil)
        #expect(
            String(decoding: response.body, as: UTF8.self).contains("not answered within 1 s")
                && String(decoding: response.body, as: UTF8.self).contains("request_timeout"))
        #expect(ContinuousClock.now - started < .seconds(20), "answered long before the IdP")
    }
}
