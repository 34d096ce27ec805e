import Foundation
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

/// The binary checking GitHub tokens against a local server; secrets only from the environment.
struct CLIOpaqueTests {
    @Test("github: secret from the environment, exit 0 for this app's token, 1 for another's, 2 when the secret is missing")
    func github() async throws {
        let server = try FakeHTTPServer { request in
            let token = (try? JSONParser.parseObject(request.body))?["access_token"]?.stringValue ?? ""
            guard request.headers["authorization"] == "Basic " + Data("Iv1.abc:topsecret".utf8).base64EncodedString() else {
                return .json("{\"message\":\"Bad credentials\"}", status: 401)
            }
            return token == "gho_ours"
                ? .json("{\"scopes\":[],\"app\":{\"client_id\":\"Iv1.abc\"},\"user\":{\"login\":\"octocat\",\"id\":1},\"expires_at\":null}")
                : .json(OpaqueTokenFixtures.gitHubNotFound, status: 404)
        }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            http: { timeout_ms: 5000 }
            providers:
              github: { client_id: "Iv1.abc", client_secret_env: "TG_TEST_GITHUB_SECRET", api_url: "\(server.baseURL)", dev_idp: true }
            """)
        let environment = ["TG_TEST_GITHUB_SECRET": "topsecret"]
        let ours = try await BinaryRunner.run(
            ["verify", "--config", config, "--provider", "github", "--token", "gho_ours"], environment: environment)
        #expect(ours.status == 0, "\(ours.stdout) \(ours.stderr)")
        #expect(ours.stdout.contains("\"login\":\"octocat\""))
        let theirs = try await BinaryRunner.run(
            ["verify", "--config", config, "--provider", "github", "--token", "gho_theirs"], environment: environment)
        #expect(theirs.status == 1)
        #expect(theirs.stdout.contains("token_inactive"))
        let wrong = try await BinaryRunner.run(
            ["verify", "--config", config, "--provider", "github", "--token", "gho_ours"], environment: ["TG_TEST_GITHUB_SECRET": "nope"])
        #expect(wrong.status == 3, "our credentials refused: keys_unavailable")
        #expect(!(wrong.stdout + wrong.stderr).contains("nope"))
        let missing = try await BinaryRunner.run(["verify", "--config", config, "--provider", "github", "--token", "gho_ours"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("providers.github.client_secret_env"))
        // Batch mixes them fine, in order.
        let batch = try await BinaryRunner.run(
            ["batch", "--config", config, "-"],
            stdin: "{\"id\":1,\"provider\":\"github\",\"token\":\"gho_ours\"}\n{\"id\":2,\"provider\":\"github\",\"token\":\"gho_theirs\"}\n",
            environment: environment)
        let lines = batch.stdout.split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines.first?.contains("\"valid\":true") == true && lines.last?.contains("token_inactive") == true)
    }
}
