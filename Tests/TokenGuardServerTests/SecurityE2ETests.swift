import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardTestSupport

/// The audit's findings against the real binary: HTTP, batch and the CLI, with a real redis-server.
@Suite(.serialized)
struct SecurityE2ETests {
    let nonce = "security-e2e-nonce"

    func json(_ response: HTTPResponse) throws -> JSONObject { try JSONParser.parseObject(response.body) }
    func code(_ response: HTTPResponse) throws -> String? {
        try json(response)["error"]?.objectValue?["code"]?.stringValue
    }

    /// A JSON string literal with every non-ASCII scalar written as its raw UTF-8 (what an attacker would send).
    func literal(_ text: String) -> String { JSONWriter.string(.string(text)) }

    /// A token containing K, and its look-alike variants.
    func tokenWithK(_ key: TestKey) throws -> String {
        var claims = ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: nonce)
        for attempt in 0..<50 {
            claims.set("sub", .string("001234.e2e.\(attempt).\(UUID().uuidString)"))
            let token = try key.sign(claims)
            if token.contains("K") { return token }
        }
        throw RunnerError("no token with a K in 50 attempts")
    }

    func lookAlikes(_ token: String) -> [String] {
        [
            token.replacing("K", with: "\u{212A}"), token + "\u{0}", token + "\u{200B}", "\u{FEFF}" + token, token + "\u{301}",
            token.replacingOccurrences(of: ".", with: "\u{FF0E}"),
        ]
    }

    @Test("HTTP, batch and CLI batch: look-alike tokens and provider names are refused before the cache and the Redis replay store")
    func lookAlikesThroughTheBinary() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            replay: { store: redis, redis_url: "\(redis.url)" }
            providers:
              Kiosk: { kind: apple, audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        let token = try tokenWithK(key)
        func body(_ provider: String, _ token: String) -> String {
            "{\"provider\":\(literal(provider)),\"token\":\(literal(token)),\"nonce\":\"\(nonce)\"}"
        }
        let first = try await server.post("/v1/verify", body("Kiosk", token))
        #expect(first.status == 200, "\(String(decoding: first.body, as: UTF8.self))")
        for variant in lookAlikes(token) {
            let response = try await server.post("/v1/verify", body("Kiosk", variant))
            #expect(response.status == 401)
            #expect(try code(response) == "malformed_token")
            // The same variant written with JSON \u escapes.
            let escaped = variant.unicodeScalars.map { ($0.value >= 0x20 && $0.value < 0x7F) ? String($0) : String(format: "\\u%04X", $0.value) }
                .joined()
            let viaEscape = try await server.post("/v1/verify", "{\"provider\":\"Kiosk\",\"token\":\"\(escaped)\",\"nonce\":\"\(nonce)\"}")
            #expect(try code(viaEscape) == "malformed_token", "\(escaped.suffix(12)): \(String(decoding: viaEscape.body, as: UTF8.self))")
        }
        for provider in ["\u{212A}iosk", "Kiosk\u{200B}", "kiosk"] {
            let response = try await server.post("/v1/verify", body(provider, token))
            #expect(response.status == 400)
            #expect(try code(response) == "unknown_provider")
        }
        let items = lookAlikes(token).map { "{\"provider\":\"Kiosk\",\"token\":\(literal($0)),\"nonce\":\"\(nonce)\"}" }.joined(separator: ",")
        let batch = try json(try await server.post("/v1/verify/batch", "{\"items\":[\(items)]}"))
        let codes = batch["results"]?.arrayValue?.map { $0.objectValue?["error"]?.objectValue?["code"]?.stringValue }
        #expect(codes == Array(repeating: "malformed_token", count: lookAlikes(token).count))
        // The original is a replay now: no look-alike bought a second use.
        #expect(try code(try await server.post("/v1/verify", body("Kiosk", token))) == "token_replayed")

        // tokenguard batch (no replay: a log is not a use) refuses the same variants.
        let lines = ([token] + lookAlikes(token)).enumerated().map {
            "{\"id\":\($0.offset),\"provider\":\"Kiosk\",\"token\":\(literal($0.element)),\"nonce\":\"\(nonce)\"}"
        }
        let input = try workspace.write("lines.ndjson", lines.joined(separator: "\n") + "\n")
        let plainConfig = try workspace.write(
            "plain.yaml", "providers:\n  Kiosk: { kind: apple, audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n")
        let run = try await BinaryRunner.run(["batch", "--config", plainConfig, input])
        let verdicts = run.stdout.split(separator: "\n").map { try? JSONParser.parseObject(Array($0.utf8)) }
        #expect(verdicts.count == lines.count)
        #expect(verdicts.first??["valid"] == .bool(true))
        for verdict in verdicts.dropFirst() { #expect(verdict?["error"]?.objectValue?["code"] == .string("malformed_token")) }
    }

    @Test("caller keys: /v1/ needs X-Tokenguard-Key (403 caller_not_allowed); health, readiness and metrics stay open; a key file rotates")
    func callerKeys() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let keyFile = try workspace.write("callers.txt", "first-caller-key-0001\nsecond-caller-key-0002\n")
        let provider = "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n"
        let envConfig = try workspace.write("env.yaml", "server: { caller_keys_env: TG_TEST_CALLER_KEYS }\n" + provider)
        let fileConfig = try workspace.write("file.yaml", "server: { caller_keys_file: \"\(keyFile)\" }\n" + provider)
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: nonce))
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}"

        let server = try await ServerProcess(
            arguments: ["--config", envConfig], environment: ["TG_TEST_CALLER_KEYS": "env-caller-key-000001, env-caller-key-000002"],
            workspace: workspace)
        defer { server.stop() }
        for headers in [
            [], [("X-Tokenguard-Key", "wrong-caller-key-000001")], [("X-Tokenguard-Key", "env-caller-key-00000")],
            [("X-Tokenguard-Key", "env-caller-key-000001"), ("X-Tokenguard-Key", "env-caller-key-000001")],
        ] as [[(String, String)]] {
            let refused = try await server.post("/v1/verify", body, headers: headers)
            #expect(refused.status == 403)
            #expect(try code(refused) == "caller_not_allowed")
            #expect(try await server.get("/v1/providers", headers: headers).status == 403)
        }
        #expect(try await server.post("/v1/verify/batch", "{\"items\":[]}").status == 403)
        // Deny by default: what the router reaches anyway (empty segments) needs the key too.
        for path in ["//v1/verify", "///v1/verify", "//v1//verify", "/v1//verify", "//v1/verify/batch", "/v1/verify/", "/v1/notifications/../verify"]
        {
            let sneaky = try await server.post(path, body)
            #expect(sneaky.status == 403, "\(path): \(sneaky.status)")
        }
        for path in ["//v1/providers", "/v1//providers", "//healthz/../v1/providers", "/metrics/../v1/providers"] {
            #expect(try await server.get(path).status == 403, "\(path)")
        }
        #expect(try await server.post("/v1/verify", body, headers: [("X-Tokenguard-Key", "env-caller-key-000002")]).status == 200)
        #expect(try await server.post("/v1/verify", body, headers: [("x-tokenguard-key", "env-caller-key-000001")]).status == 200)
        for open in ["/healthz", "/readyz", "/metrics"] { #expect(try await server.get(open).status == 200, "\(open)") }
        #expect(!server.log().contains("env-caller-key"), "keys are never logged")

        let missing = try await BinaryRunner.run(["serve", "--config", envConfig, "--listen", "127.0.0.1:0"])
        #expect(missing.status == 2, "an unset caller_keys_env is a config error")
        #expect(missing.stderr.contains("server.caller_keys_env"))
        // Only serve needs caller keys: verify and batch with the same config do not.
        let offline = try await BinaryRunner.run(["verify", "--config", envConfig, "--provider", "apple", "--token", token, "--nonce", nonce])
        #expect(offline.status == 0, "\(offline.stdout) \(offline.stderr)")

        let fromFile = try await ServerProcess(arguments: ["--config", fileConfig], workspace: workspace)
        defer { fromFile.stop() }
        try await fromFile.waitUntilReady()
        #expect(try await fromFile.post("/v1/verify", body, headers: [("X-Tokenguard-Key", "first-caller-key-0001")]).status == 200)
        try "third-caller-key-0003\n".write(toFile: keyFile, atomically: true, encoding: .utf8)
        var rotated = false
        for _ in 0..<60 {
            let old = try await fromFile.post("/v1/verify", body, headers: [("X-Tokenguard-Key", "first-caller-key-0001")])
            if old.status == 403 {
                rotated = true
                break
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(rotated, "a removed key stops working without a restart")
        #expect(try await fromFile.post("/v1/verify", body, headers: [("X-Tokenguard-Key", "third-caller-key-0003")]).status == 200)
    }

    @Test("skipped keys are listed in /v1/providers and tokenguard keys; a token naming one is told why")
    func skippedKeysReported() async throws {
        let workspace = try TempWorkspace()
        let weak = try TestKey(.rsa(bits: 1024), keyID: "weak-1", algorithm: .rs256)
        let good = try SharedTestKeys.rsa()
        let jwks = try workspace.write(
            "jwks.json", "{\"keys\":[\(JSONWriter.string(.object(try weak.jwk()))),\(JSONWriter.string(.object(try good.jwk())))]}")
        let config = try workspace.write(
            "tokenguard.yaml", "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n")
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        let providers = try json(try await server.get("/v1/providers"))
        let apple = providers["providers"]?.arrayValue?.first?.objectValue
        let skipped = apple?["skipped_keys"]?.arrayValue?.first?.objectValue
        #expect(skipped?["kid"] == .string("weak-1"))
        #expect(skipped?["reason"]?.stringValue?.contains("below 2048") == true)
        let token = try weak.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: nonce))
        let response = try await server.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}")
        let message = try json(response)["error"]?.objectValue?["message"]?.stringValue ?? ""
        #expect(message.contains("weak-1") && message.contains("skipped"))
        let keys = try await BinaryRunner.run(["keys", "--config", config])
        #expect(keys.stdout.contains("skipped_keys") && keys.stdout.contains("weak-1"))

        // A fetched JWKS whose every key is skipped still shows why.
        let idp = try FakeHTTPServer { _ in .json("{\"keys\":[\(JSONWriter.string(.object(try! weak.jwk())))]}") }
        defer { idp.stop() }
        let fetched = try workspace.write(
            "fetched.yaml",
            "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_url: \"\(idp.baseURL)/jwks\", dev_idp: true }\n")
        let fetchingServer = try await ServerProcess(arguments: ["--config", fetched], workspace: workspace)
        defer { fetchingServer.stop() }
        var report = ""
        for _ in 0..<100 {
            report = String(decoding: try await fetchingServer.get("/v1/providers").body, as: UTF8.self)
            if report.contains("weak-1") { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(report.contains("skipped_keys") && report.contains("weak-1") && report.contains("below 2048"), "\(report)")
    }

    @Test("a discovered jwks_uri on another host is refused and never fetched: keys_unavailable, last_error says why")
    func discoveryBoundToIssuer() async throws {
        let other = try FakeHTTPServer { _ in .json("{\"keys\":[]}") }
        defer { other.stop() }
        let issuerServer = try FakeHTTPServer { _ in .json("{}") }
        defer { issuerServer.stop() }
        let issuer = issuerServer.baseURL
        let otherJWKS = other.baseURL.replacingOccurrences(of: "127.0.0.1", with: "localhost") + "/keys"
        issuerServer.respond { request in
            request.path == "/.well-known/openid-configuration"
                ? .json("{\"issuer\":\"\(issuer)\",\"jwks_uri\":\"\(otherJWKS)\"}") : FakeHTTPServer.Response(status: 404)
        }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml", "providers:\n  corp: { kind: oidc, issuer: \"\(issuer)\", audiences: [api], dev_idp: true }\n")
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        let key = try SharedTestKeys.rsa()
        let token = try key.sign(
            JSONObject([
                ("iss", .string(issuer)), ("aud", .string("api")), ("sub", .string("s")),
                ("exp", .integer(Int64(Date().timeIntervalSince1970) + 600)),
            ]))
        let response = try await server.post("/v1/verify", "{\"provider\":\"corp\",\"token\":\"\(token)\"}")
        #expect(response.status == 503, "\(String(decoding: response.body, as: UTF8.self))")
        #expect(try code(response) == "keys_unavailable")
        let providers = String(decoding: try await server.get("/v1/providers").body, as: UTF8.self)
        #expect(providers.contains("jwks_uri refused"))
        #expect(other.count("/keys") == 0, "the other host is never contacted")
    }

    @Test("malformed GitHub and Graph answers are 503 and never crash the service")
    func upstreamGarbage() async throws {
        let github = try FakeHTTPServer { _ in .json("{\"message\":\"rate limited\"}", status: 403, headers: [("x-ratelimit-reset", "nan")]) }
        defer { github.stop() }
        let graph = try FakeHTTPServer { _ in
            .json("{\"data\":{\"app_id\":\"123\",\"type\":\"USER\",\"user_id\":\"42\",\"is_valid\":true,\"expires_at\":-9223372036854775808}}")
        }
        defer { graph.stop() }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              github: { client_id: "Iv1.abc", client_secret_env: "TG_GH", api_url: "\(github.baseURL)", dev_idp: true }
              facebook_classic: { app_id: "123", app_secret_env: "TG_FB", graph_url: "\(graph.baseURL)", dev_idp: true }
            """)
        let server = try await ServerProcess(
            arguments: ["--config", config], environment: ["TG_GH": "gh-secret", "TG_FB": "fb-secret"], workspace: workspace)
        defer { server.stop() }
        for reset in ["nan", "inf", "1e300", "-1e300", "99999999999999999999"] {
            github.respond { _ in .json("{}", status: 403, headers: [("x-ratelimit-reset", reset), ("retry-after", reset)]) }
            let response = try await server.post("/v1/verify", "{\"provider\":\"github\",\"token\":\"gho_\(reset.filter(\.isLetter))abc\"}")
            #expect(response.status == 503, "reset \(reset)")
            #expect(server.process.isRunning)
        }
        for expires in ["-9223372036854775808", "1e300", "\"x\""] {
            graph.respond { _ in
                .json("{\"data\":{\"app_id\":\"123\",\"type\":\"USER\",\"user_id\":\"42\",\"is_valid\":true,\"expires_at\":\(expires)}}")
            }
            let response = try await server.post(
                "/v1/verify", "{\"provider\":\"facebook_classic\",\"token\":\"EAAB\(expires.filter(\.isNumber).prefix(5))\"}")
            #expect(response.status == 503, "expires_at \(expires)")
            #expect(server.process.isRunning)
        }
        #expect(!server.log().contains("gh-secret") && !server.log().contains("fb-secret"))
    }

    @Test("dev-idp, mint, and a dev IdP restarted from its state dir: minted tokens verify (the PEM is read from live memory)")
    func devIdPRestartedFromStateDir() async throws {
        let workspace = try TempWorkspace()
        let stateDir = workspace.url.appendingPathComponent("idp").path
        let port = try FreeLoopbackPort.pick()
        let config = try workspace.write(
            "trusted.yaml",
            "providers:\n  apple: { audiences: [\"com.example.app\"], jwks_url: \"http://127.0.0.1:\(port)/jwks\", dev_idp: true }\n")
        for round in 0..<2 {
            let idp = try await DevIdPProcess(stateDir: stateDir, port: port)
            defer { idp.stop() }
            #expect(idp.jwks?.status == 200, "round \(round)")
            let mint = try await BinaryRunner.run(["mint", "--provider", "apple", "--nonce", "raw-\(round)", "--state-dir", stateDir])
            #expect(mint.status == 0, "round \(round): \(mint.stderr)")
            let token = mint.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let verdict = try await BinaryRunner.run([
                "verify", "--config", config, "--provider", "apple", "--token", token, "--nonce", "raw-\(round)",
            ])
            #expect(verdict.status == 0, "round \(round): \(verdict.stdout) \(verdict.stderr)")
        }
    }
}

/// The remaining findings through the binary: ECDSA twins, explicit typing, azp, small-order Ed25519 keys and the
/// Microsoft tenant rule, over HTTP and through `tokenguard batch`.
@Suite(.serialized)
struct SecurityFindingsE2ETests {
    let now = Int64(Date().timeIntervalSince1970)

    func code(_ response: HTTPResponse) throws -> String? {
        try JSONParser.parseObject(response.body)["error"]?.objectValue?["code"]?.stringValue
    }

    @Test("ECDSA twin, at+jwt, foreign azp and a small-order Ed25519 key: refused over HTTP and in batch; explain claims like verify")
    func findingsThroughTheBinary() async throws {
        let workspace = try TempWorkspace()
        let ec = try SharedTestKeys.p256()
        let smallOrder = "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"identity\",\"x\":\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}"
        let jwks = try workspace.write("jwks.json", "{\"keys\":[\(JSONWriter.string(.object(try ec.jwk()))),\(smallOrder)]}")
        let provider = "  corp: { kind: oidc, issuer: \"https://idp.example\", audiences: [api], jwks_file: \"\(jwks)\" }\n"
        let config = try workspace.write("tokenguard.yaml", "replay: { store: memory }\nproviders:\n" + provider)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        func claims(_ sub: String, _ extra: [(String, JSONValue)] = []) -> JSONObject {
            var object = JSONObject([
                ("iss", .string("https://idp.example")), ("aud", .string("api")), ("sub", .string(sub)), ("exp", .integer(now + 600)),
            ])
            for (name, value) in extra { object.set(name, value) }
            return object
        }
        func body(_ token: String, explain: Bool = false) -> String { "{\"provider\":\"corp\",\"token\":\"\(token)\",\"explain\":\(explain)}" }

        // An ECDSA token and its twin (r, n - s): one sign-in, one use.
        let token = try ec.sign(claims("twin"))
        let parts = segments(token)
        let signature = try #require(Base64URL.decode(parts[2]))
        let twin =
            parts[0] + "." + parts[1] + "." + Base64URL.encode(Array(signature[..<32]) + ByteIdentityTestsMath.p256Negate(Array(signature[32...])))
        #expect(try await server.post("/v1/verify", body(token, explain: true)).status == 200)
        let second = try await server.post("/v1/verify", body(twin))
        #expect(try code(second) == "token_replayed")
        let again = try JSONParser.parseObject(try await server.post("/v1/verify", body(token, explain: true)).body)
        #expect(again["error"]?.objectValue?["code"] == .string("token_replayed"), "an explained request claimed the token like a plain one")
        let replayCheck = again["checks"]?.arrayValue?.first { $0.objectValue?["check"] == .string("replay") }?.objectValue
        #expect(replayCheck?["ok"] == .bool(false))

        let access = try ec.sign(claims("access"), extraHeader: [("typ", .string("at+jwt"))])
        #expect(try code(try await server.post("/v1/verify", body(access))) == "invalid_token_type")
        let foreignParty = try ec.sign(claims("azp", [("azp", .string("someone-else"))]))
        #expect(try code(try await server.post("/v1/verify", body(foreignParty))) == "invalid_audience")
        let header = Base64URL.encode(Array("{\"alg\":\"EdDSA\",\"kid\":\"identity\"}".utf8))
        let forged = header + "." + parts[1] + "." + Base64URL.encode([1] + [UInt8](repeating: 0, count: 63))
        #expect(try code(try await server.post("/v1/verify", body(forged))) == "unknown_key")
        let providers = String(decoding: try await server.get("/v1/providers").body, as: UTF8.self)
        #expect(providers.contains("identity") && providers.contains("small-order"))

        // tokenguard batch: the same verdicts.
        let fresh = try ec.sign(claims("batch"))
        let freshParts = segments(fresh)
        let freshSignature = try #require(Base64URL.decode(freshParts[2]))
        let freshTwin =
            freshParts[0] + "." + freshParts[1] + "."
            + Base64URL.encode(Array(freshSignature[..<32]) + ByteIdentityTestsMath.p256Negate(Array(freshSignature[32...])))
        let lines = [fresh, freshTwin, access, foreignParty, forged].enumerated().map {
            "{\"id\":\($0.offset),\"provider\":\"corp\",\"token\":\"\($0.element)\"}"
        }
        let input = try workspace.write("lines.ndjson", lines.joined(separator: "\n") + "\n")
        let run = try await BinaryRunner.run(["batch", "--config", config, input])
        let codes = run.stdout.split(separator: "\n").map { line -> String in
            let verdict = try? JSONParser.parseObject(Array(line.utf8))
            return verdict?["error"]?.objectValue?["code"]?.stringValue ?? "valid"
        }
        // Lines run concurrently: exactly one of the token and its twin is the first use.
        #expect(codes.prefix(2).sorted() == ["token_replayed", "valid"], "\(run.stdout)")
        #expect(Array(codes.dropFirst(2)) == ["invalid_token_type", "invalid_audience", "unknown_key"], "\(run.stdout)")
    }

    @Test("microsoft without tenants is a config error naming tenants; built-in defaults say what to set")
    func microsoftTenants() async throws {
        let workspace = try TempWorkspace()
        let config = try workspace.write("ms.yaml", "providers:\n  microsoft: { audiences: [\"a\"] }\n")
        let run = try await BinaryRunner.run(["verify", "--config", config, "--provider", "microsoft", "--token", "a.b.c"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("providers.microsoft.tenants"))
    }
}

/// Arithmetic for the ECDSA twin: n - s over P-256's group order.
enum ByteIdentityTestsMath {
    static let p256Order: [UInt8] = [
        0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
    ]

    static func p256Negate(_ s: [UInt8]) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: 32)
        var borrow = 0
        for index in stride(from: 31, through: 0, by: -1) {
            var digit = Int(p256Order[index]) - Int(s[index]) - borrow
            borrow = digit < 0 ? 1 : 0
            if digit < 0 { digit += 256 }
            result[index] = UInt8(digit)
        }
        return result
    }
}
