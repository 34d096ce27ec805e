import TokenGuardCrypto

/// A `tokenguard serve` whose `apple` provider fetches its keys from a fake IdP that publishes `key`, beside
/// `rotated`, a key the IdP has not published: a token signed with it makes the verification refetch, for tests of
/// what a refetch meets (an IdP that hangs, answers late, or shares a pool with another upstream).
package struct FetchedKeysServer: Sendable {
    package let idp: FakeHTTPServer
    package let server: ServerProcess
    package let key: TestKey
    package let rotated: TestKey

    /// `yaml` adds top-level settings (`http:`, `server:` …) and `providers` more provider entries; unknown kids are
    /// refetched without a cooldown. Returns once the server is ready (its first fetch done).
    package static func start(yaml: String, providers: String = "", environment: [String: String] = [:]) async throws -> FetchedKeysServer {
        let key = try SharedTestKeys.rsa()
        let rotated = try SharedTestKeys.key("rsa-test-rotated", .rsa(bits: 2048))
        let jwks = try SharedTestKeys.jwks([key])
        let idp = try FakeHTTPServer { _ in .json(jwks) }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            \(yaml)
            keys: { refetch_cooldown_seconds: 0 }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_url: "\(idp.baseURL)/jwks", dev_idp: true }
            \(providers)
            """)
        let server = try await ServerProcess(arguments: ["--config", config], environment: environment, workspace: workspace)
        try await server.waitUntilReady()
        return FetchedKeysServer(idp: idp, server: server, key: key, rotated: rotated)
    }

    /// From now on the IdP publishes both keys, each answer `delay` seconds late.
    package func publishBoth(delay: Double = 0) throws {
        let both = try SharedTestKeys.jwks([key, rotated])
        idp.respond { _ in
            var response = FakeHTTPServer.Response.json(both)
            response.delay = delay
            return response
        }
    }

    package func stop() {
        server.stop()
        idp.stop()
    }
}
