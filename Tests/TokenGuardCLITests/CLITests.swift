import Foundation
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

/// End-to-end tests of the `tokenguard` binary: exit codes, JSON output, NDJSON batches.
struct CLITests {
    let now = Verifiers.now
    let nonce = "cli-raw-nonce"

    func workspace() throws -> (TempWorkspace, String, TestKey) {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        try workspace.write("apple-jwks.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            leeway_seconds: 60
            key_archive: "keys.sqlite"
            http: { connect_timeout_ms: 300, timeout_ms: 500 }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "apple-jwks.json" }
              live:  { kind: apple, audiences: ["\(ProviderTokens.appleAudience)"], jwks_url: "https://127.0.0.1:9/jwks" }
            """)
        return (workspace, config, key)
    }

    func json(_ text: String) throws -> JSONObject { try JSONParser.parseObject(Array(text.utf8)) }

    @Test("verify: exit 0 valid, 1 rejected, 2 usage, 3 keys unavailable")
    func verifyExitCodes() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let base = ["verify", "--config", config, "--at", String(now)]

        let valid = try await BinaryRunner.run(base + ["--provider", "apple", "--token", token, "--nonce", nonce])
        #expect(valid.status == 0, "\(valid.stderr)")
        #expect(try json(valid.stdout)["valid"] == .bool(true))
        #expect(try json(valid.stdout)["email_verified"] == .bool(true))

        let rejected = try await BinaryRunner.run(base + ["--provider", "apple", "--token", token, "--nonce", "other"])
        #expect(rejected.status == 1)
        let error = try #require(try json(rejected.stdout)["error"]?.objectValue)
        #expect(error["code"] == .string("nonce_mismatch"))
        #expect(!rejected.stdout.contains(token) && !rejected.stdout.contains("other"), "no token or nonce echoed")

        let fromStdin = try await BinaryRunner.run(base + ["--provider", "apple", "--token", "-", "--nonce", nonce], stdin: token + "\n")
        #expect(fromStdin.status == 0)
        // A value starting with '-' is the value, not an option (red team): a junk token is refused as malformed (exit
        // 1, not a usage error), and a nonce that starts with the base64url '-' is the app's nonce.
        let dashToken = try await BinaryRunner.run(base + ["--provider", "apple", "--token", "-JMg.eyJhIjoxfQ.AAAA", "--nonce", nonce])
        #expect(dashToken.status == 1, "\(dashToken.stderr)")
        #expect(try json(dashToken.stdout)["error"]?.objectValue?["code"] == .string("malformed_token"), "\(dashToken.stdout)")
        // A value left out before the next option is a usage error (red team round 12), not a value judged.
        let leftOut = [
            ["--provider", "apple", "--token", token, "--nonce", "--explain"], ["--provider", "apple", "--token", "--help"],
            ["--provider", "apple", "--token", token, "--nonce", "-h"], ["--token", "--nonce", nonce, "--provider", "apple"],
            // The next option in its `--name=value` form, or the end of options (red team round 13: judged, exit 1, and
            // the option lost).
            ["--provider", "apple", "--token", token, "--nonce", "--config=\(config)"],
            ["--provider", "apple", "--token", token, "--nonce", "--at=1"], ["--token", token, "--nonce", "--provider=apple"],
            ["--provider", "apple", "--token", token, "--nonce", "--"], ["--provider", "apple", "--token", "--nonce=\(nonce)"],
            // An option given twice: a refused value before the last one was hidden (red team round 13); any option.
            ["--provider", "apple", "--token", token, "--nonce", "--explain", "--nonce", nonce],
            ["--provider", "apple", "--token", token, "--token", token, "--nonce", nonce],
            ["--provider", "live", "--provider", "apple", "--token", token, "--nonce", nonce],
            ["--at", String(now), "--provider", "apple", "--token", token, "--nonce", nonce],
            ["--config", config, "--provider", "apple", "--token", token, "--nonce", nonce],
            // ArgumentParser's flags that answer instead of running: as a value, or anywhere but first (red team round
            // 14: a completion script and exit 0, the code for "valid").
            ["--provider", "apple", "--token", token, "--nonce", "--generate-completion-script"],
            ["--provider", "apple", "--token", token, "--nonce", "--generate-completion-script=zsh"],
            ["--provider", "apple", "--token", "--generate-completion-script=bash", "--nonce", nonce],
            ["--provider", "apple", "--token", token, "--nonce", "WRONG", "--generate-completion-script"],
            ["--provider", "apple", "--token", token, "--nonce", nonce, "--experimental-dump-help"],
            // Help and version only as written: not doubled, not with a value (red team round 15: help and exit 0).
            ["--provider", "apple", "--token", token, "--nonce", "WRONG", "-hh"],
            ["--provider", "apple", "--token", token, "--nonce", "WRONG", "-h=x"],
            ["--provider", "apple", "--token", token, "--nonce", "WRONG", "--help=x"],
            ["--provider", "apple", "--token", token, "--nonce", "WRONG", "--version=x"],
            ["--provider", "apple", "--token", token, "--nonce", "WRONG", "--explain=no"],
        ]
        for missing in leftOut {
            let answer = try await BinaryRunner.run(base + missing)
            #expect(answer.status == 2, "\(missing.suffix(3)): \(answer.stdout) \(answer.stderr)")
            #expect(answer.stdout.isEmpty, "\(missing.suffix(3)): \(answer.stdout)")
        }
        // A nonce that starts with the base64url '-', even three of them (red team round 14: "Invalid option"), in
        // either form.
        for dashNonce in ["-nonce-from-a-random-generator", "---nonce"] {
            let dashNonceToken = try key.sign(ProviderTokens.apple(now: now, rawNonce: dashNonce))
            for form in [["--nonce", dashNonce], ["--nonce=\(dashNonce)"]] {
                let dashNonceAnswer = try await BinaryRunner.run(base + ["--provider", "apple", "--token", dashNonceToken] + form)
                #expect(dashNonceAnswer.status == 0, "\(form): \(dashNonceAnswer.stderr)")
            }
        }
        // verify's help and version print, and end as usage: exit 0 means "valid" only (red team round 16).
        for flag in ["-h", "--help", "--version"] {
            let answer = try await BinaryRunner.run(base + ["--provider", "apple", "--token", token, "--nonce", "WRONG", flag])
            #expect(answer.status == 2 && !answer.stdout.isEmpty, "\(flag): \(answer.status) \(answer.stderr)")
        }
        // Given first, the completion script is still there.
        let completion = try await BinaryRunner.run(["--generate-completion-script", "bash"])
        #expect(completion.status == 0 && completion.stdout.contains("tokenguard"), "\(completion.stderr)")
        #expect(try await BinaryRunner.run(["serve", "--generate-completion-script"]).status == 2)
        // Arguments and standard input arrive as text, a byte that was not UTF-8 as U+FFFD (three bytes): such a token
        // is refused for that byte, not for a size it was not sent at, and such a nonce is not the app's (red team).
        let repaired = String(repeating: "a", count: ProviderPolicy.defaultMaxTokenBytes - 1) + "\u{FFFD}"
        let repairedAnswer = try await BinaryRunner.run(base + ["--provider", "apple", "--token", "-"], stdin: repaired)
        #expect(repairedAnswer.status == 1)
        #expect(try json(repairedAnswer.stdout)["error"]?.objectValue?["code"] == .string("malformed_token"), "\(repairedAnswer.stdout)")
        // A nonce that really holds U+FFFD is read as given (its bytes are read, not the repaired text), and one given
        // with a byte that is not UTF-8 is refused as usage (red team round 13: both were refused).
        let replacementNonce = "n\u{FFFD}"
        let replacementToken = try key.sign(ProviderTokens.apple(now: now, rawNonce: replacementNonce))
        for form in [["--nonce", replacementNonce], ["--nonce=\(replacementNonce)"]] {
            let answer = try await BinaryRunner.run(base + ["--provider", "apple", "--token", replacementToken] + form)
            #expect(answer.status == 0, "\(answer.stdout) \(answer.stderr)")
        }
        for form in ["--nonce \"$(printf 'n\\377')\"", "--nonce=\"$(printf 'n\\377')\""] {
            let answer = try await BinaryRunner.runInShell(
                "\"$0\" \(base.map { "'\($0)'" }.joined(separator: " ")) --provider apple --token '\(replacementToken)' \(form)")
            #expect(answer.status == 2, "\(form): \(answer.stdout) \(answer.stderr)")
            #expect(answer.stderr.contains("not UTF-8"), "\(form): \(answer.stderr)")
        }
        let explained = try await BinaryRunner.run(base + ["--provider", "apple", "--token", "-", "--explain"], stdin: repaired)
        #expect(try json(explained.stdout)["checks"]?.arrayValue?.count == 1, "\(explained.stdout)")
        // Standard input is read up to a bound (the limit and room for blanks), not to its end.
        let flood = try await BinaryRunner.run(
            base + ["--provider", "apple", "--token", "-"], stdin: String(repeating: "a", count: ProviderPolicy.defaultMaxTokenBytes + 5000))
        #expect(flood.status == 1)
        #expect(try json(flood.stdout)["error"]?.objectValue?["message"]?.stringValue?.contains("standard input") == true, "\(flood.stdout)")

        let unavailable = try await BinaryRunner.run(base + ["--provider", "live", "--token", token, "--nonce", nonce])
        #expect(unavailable.status == 3)
        #expect(unavailable.stdout.contains("keys_unavailable"))

        #expect(try await BinaryRunner.run(base + ["--provider", "nope", "--token", token]).status == 2)
        #expect(try await BinaryRunner.run(base + ["--provider", "apple", "--token", token, "--nonce", ""]).status == 2, "an empty nonce")
        #expect(try await BinaryRunner.run(["verify", "--config", config, "--provider", "apple"]).status == 2, "missing --token")
        #expect(try await BinaryRunner.run(["verify", "--bogus"]).status == 2)
        let noConfig = try await BinaryRunner.run(["verify", "--provider", "apple", "--token", token])
        #expect(noConfig.status == 2)
        let viaEnvironment = try await BinaryRunner.run(
            ["verify", "--provider", "apple", "--token", token, "--nonce", nonce, "--at", String(now)], environment: ["TOKENGUARD_CONFIG": config])
        #expect(viaEnvironment.status == 0)
        _ = workspace
    }

    @Test(
        "config errors name the key and exit 2",
        arguments: [
            ("providers:\n  apple: { audiences: [\"a\"], audience: \"typo\" }\n", "providers.apple.audience"),
            ("providers:\n  apple: { audiences: [] }\n", "providers.apple.audiences"),
            ("providers:\n  apple: { audiences: [\"a\"], nonce: md5 }\n", "providers.apple.nonce"),
            ("providers:\n  corp: { kind: oidc, audiences: [\"a\"], jwks_url: \"https://x\" }\n", "providers.corp.issuer"),
            ("providers:\n  corp: { kind: oidc, issuer: \"http://idp.example\", audiences: [\"a\"] }\n", "providers.corp.issuer"),
            ("providers:\n  apple: { audiences: [\"a\"], jwks_url: \"http://127.0.0.1:9/jwks\" }\n", "dev_idp: true"),
            ("providers:\n  microsoft: { audiences: [\"a\"], tenants: [\"contoso\"] }\n", "providers.microsoft.tenants"),
            ("providers:\n  gh: { kind: github, client_id: \"x\" }\n", "providers.gh"),
            ("leeway_seconds: \"sixty\"\n", "leeway_seconds"),
            ("max_token_bytes: 10\n", "max_token_bytes"),
            ("replay: { store: nosql }\n", "replay.store"),
            ("replay: { store: redis }\n", "replay.redis_url"),
            ("listen: \"nowhere\"\n", "listen"),
            ("lisen: \"127.0.0.1:8080\"\n", "lisen"),
            ("providers: [1, 2]\n", "providers"),
            ("providers:\n  apple: { audiences: [\"a\"] }\n  apple: { audiences: [\"b\"] }\n", "YAML"),
        ])
    func configErrors(yaml: String, key: String) async throws {
        let workspace = try TempWorkspace()
        let config = try workspace.write("bad.yaml", yaml)
        let result = try await BinaryRunner.run(["verify", "--config", config, "--provider", "apple", "--token", "a.b.c"])
        #expect(result.status == 2)
        #expect(result.stderr.contains(key), "stderr should name \(key): \(result.stderr)")
    }

    @Test("batch: thousands of lines in order, bad lines get their own verdict, same output on 1 and 4 jobs")
    func batch() async throws {
        let (workspace, config, key) = try workspace()
        let valid = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        var expired = ProviderTokens.apple(now: now - 200_000, rawNonce: nonce)
        expired.set("iat", .integer(now - 200_000))
        let expiredToken = try key.sign(expired)
        var lines: [String] = []
        var expected: [String] = []
        for index in 0..<3000 {
            switch index % 6 {
            case 0:
                lines.append("{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(valid)\",\"nonce\":\"\(nonce)\",\"at\":\(now)}")
                expected.append("valid")
            case 1:
                lines.append("{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(expiredToken)\",\"nonce\":\"\(nonce)\"}")
                expected.append("token_expired")
            case 2:
                lines.append("{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(valid)\",\"nonce\":\"wrong\",\"at\":\(now)}")
                expected.append("nonce_mismatch")
            case 3:
                lines.append("{\"id\":\(index),\"provider\":\"apple\",\"token\":\"not-a-token\"}")
                expected.append("malformed_token")
            case 4:
                lines.append(index % 4 == 0 ? "{\"id\":\(index),\"provider\":\"apple\"" : "{\"id\":\(index),\"provider\":7,\"token\":\"x\"}")
                expected.append("invalid_request")
            default:
                lines.append("{\"id\":\(index),\"provider\":\"facebook_limited\",\"token\":\"\(valid)\"}")
                expected.append("unknown_provider")
            }
        }
        // An over-long line is answered without being buffered, and keeps its id (contract v2 "Batch ids").
        lines.append("{\"id\":\"huge\",\"provider\":\"apple\",\"token\":\"" + String(repeating: "A", count: 100_000) + "\"}")
        expected.append("token_too_large")
        let input = try workspace.write("log.ndjson", lines.joined(separator: "\n") + "\n\n")
        var outputs: [String] = []
        for jobs in ["1", "4"] {
            let result = try await BinaryRunner.run(["batch", "--config", config, "--jobs", jobs, input])
            #expect(result.status == 0, "\(result.stderr)")
            let outLines = result.stdout.split(separator: "\n")
            #expect(outLines.count == expected.count)
            for (index, line) in outLines.enumerated() where index < expected.count {
                let verdict = try json(String(line))
                let code = verdict["error"]?.objectValue?["code"]?.stringValue ?? "valid"
                #expect(code == expected[index], "line \(index): \(line.prefix(200))")
                // A truncated line is not one whole object: an id after the cut could not have been seen, so none is echoed.
                let truncated = index % 6 == 4 && index % 4 == 0
                let id: JSONValue = index >= 3000 ? .string("huge") : truncated ? .null : .integer(Int64(index))
                #expect(verdict["id"] == id, "order and id kept at line \(index)")
            }
            #expect(result.stderr.contains("3001 lines, 500 valid"), "summary: \(result.stderr)")
            outputs.append(result.stdout)
        }
        #expect(outputs[0] == outputs[1])
        // stdin works too, and a keys_unavailable answer makes the exit status 3.
        let live = try await BinaryRunner.run(
            ["batch", "--config", config, "-"], stdin: "{\"id\":1,\"provider\":\"live\",\"token\":\"\(valid)\",\"nonce\":\"\(nonce)\"}\n")
        #expect(live.status == 3)
        let unavailable = try json(live.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(unavailable["error"]?.objectValue?["code"] == .string("keys_unavailable"))
        #expect(unavailable["id"] == .integer(1))
        #expect(unavailable["valid"] == nil, "an outage is no rejection: no valid member")
    }
}
