import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// Provider variants through the binary: one `facebook` entry for both logins, Apple's normalised account fields.
@Suite(.serialized)
struct ProviderVariantsE2ETests {
    func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    func object(_ response: HTTPResponse) throws -> JSONObject { try JSONParser.parseObject(response.body) }

    @Test("a facebook entry with its keys in a file still calls out when it has the app secret (debug_token)")
    func facebookFileEntryCallsOut() throws {
        let workspace = try TempWorkspace()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([try SharedTestKeys.rsa()]))
        func parse(_ entry: String) throws -> Configuration {
            try Configuration.parse(
                yaml: "providers:\n  facebook: { kind: facebook, app_id: \"1\", jwks_file: \"\(jwks)\"\(entry) }\n", environment: ["TG_FB": "s"])
        }
        // With only this entry configured, classic tokens got no fetcher and every one was answered 503.
        #expect(VerifierRegistry.needsFetcher(try parse(", app_secret_env: TG_FB")))
        #expect(!VerifierRegistry.needsFetcher(try parse("")))
    }

    @Test(
        "facebook: a Limited Login JWS verifies as limited, a classic access token through debug_token as classic; misrouted tokens name the right kind"
    )
    func oneFacebookEntry() async throws {
        let appID = ProviderTokens.facebookAudience
        let secret = "fb-app-secret-0123456789"
        let graph = try FakeHTTPServer { request in
            guard request.path.hasPrefix("/debug_token?"), request.path.contains("input_token=EAAB") else {
                return .json("{\"data\":{\"error\":{\"code\":190,\"message\":\"Invalid OAuth access token.\"},\"is_valid\":false,\"scopes\":[]}}")
            }
            return .json(
                "{\"data\":{\"app_id\":\"\(appID)\",\"type\":\"USER\",\"application\":\"x\",\"expires_at\":\(Int(Date().timeIntervalSince1970) + 3600),\"is_valid\":true,\"scopes\":[\"public_profile\"],\"user_id\":\"10158\"}}"
            )
        }
        defer { graph.stop() }
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              facebook: { kind: facebook, app_id: "\(appID)", app_secret_env: TG_FB, graph_url: "\(graph.baseURL)", dev_idp: true, jwks_file: "\(jwks)" }
              fb_limited_only: { kind: facebook, app_id: "\(appID)", jwks_file: "\(jwks)" }
              facebook_limited: { audiences: ["\(appID)"], jwks_file: "\(jwks)" }
              facebook_classic: { app_id: "\(appID)", app_secret_env: TG_FB, graph_url: "\(graph.baseURL)", dev_idp: true }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], environment: ["TG_FB": secret], workspace: workspace)
        defer { server.stop() }
        let limited = try key.sign(ProviderTokens.facebookLimited(now: now(), rawNonce: "fb-nonce"))
        let asLimited = try await server.post("/v1/verify", "{\"provider\":\"facebook\",\"token\":\"\(limited)\",\"nonce\":\"fb-nonce\"}")
        #expect(asLimited.status == 200, "\(String(decoding: asLimited.body, as: UTF8.self))")
        #expect(try object(asLimited)["login"] == .string("limited"))
        #expect(try object(asLimited)["user_id"] == .string("3944046265836837"))
        let asClassic = try await server.post("/v1/verify", "{\"provider\":\"facebook\",\"token\":\"EAABwzLixnjYBAtoken123\"}")
        #expect(asClassic.status == 200, "\(String(decoding: asClassic.body, as: UTF8.self))")
        #expect(try object(asClassic)["login"] == .string("classic"))
        #expect(try object(asClassic)["user_id"] == .string("10158"))
        let foreign = try await server.post("/v1/verify", "{\"provider\":\"facebook\",\"token\":\"XYZinvalid\"}")
        #expect(foreign.status == 401)
        // Without the app secret a facebook entry takes Limited Login only.
        let noSecret = try await server.post("/v1/verify", "{\"provider\":\"fb_limited_only\",\"token\":\"EAABwzLixnjYBAtoken123\"}")
        #expect(noSecret.status == 400 || noSecret.status == 401)
        // The single-kind providers point at the right one.
        let wrongForLimited = try object(
            try await server.post("/v1/verify", "{\"provider\":\"facebook_limited\",\"token\":\"EAABwzLixnjYBAtoken123\"}"))
        #expect(wrongForLimited["error"]?.objectValue?["code"] == .string("malformed_token"))
        #expect(wrongForLimited["error"]?.objectValue?["message"]?.stringValue?.contains("facebook_classic") == true)
        // The routing hint is for a well-formed token of the other kind: an oversized one, or one with a byte outside the
        // alphabet, gets the refusal any JWS provider gives it (red team: the hint came first).
        let oversized = try object(
            try await server.post("/v1/verify", "{\"provider\":\"facebook_limited\",\"token\":\"\(String(repeating: "A", count: 17_000))\"}"))
        #expect(oversized["error"]?.objectValue?["code"] == .string("token_too_large"))
        let outside = try object(try await server.post("/v1/verify", "{\"provider\":\"facebook_limited\",\"token\":\"EAABwz!token.x\"}"))
        #expect(outside["error"]?.objectValue?["code"] == .string("malformed_token"))
        #expect(outside["error"]?.objectValue?["message"]?.stringValue?.contains("outside the base64url alphabet") == true)
        let wrongForClassic = try object(try await server.post("/v1/verify", "{\"provider\":\"facebook_classic\",\"token\":\"\(limited)\"}"))
        #expect(wrongForClassic["error"]?.objectValue?["code"] == .string("malformed_token"))
        #expect(wrongForClassic["error"]?.objectValue?["message"]?.stringValue?.contains("facebook_limited") == true)
        #expect(!server.log().contains(secret))
    }

    @Test("Apple verdicts carry is_private_email (boolean) and real_user_status (integer), normalised from either form")
    func appleFields() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml",
            "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\", nonce_required: false }\n")
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        for asString in [false, true] {
            var claims = ProviderTokens.apple(now: now(), rawNonce: nil, emailVerifiedAsString: asString)
            claims.set("sub", .string("apple-\(asString)"))
            let verdict = try object(try await server.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(try key.sign(claims))\"}"))
            #expect(verdict["is_private_email"] == .bool(true))
            #expect(verdict["real_user_status"] == .integer(2))
            #expect(verdict["email_verified"] == .bool(true))
        }
        var bare = ProviderTokens.apple(now: now(), rawNonce: nil)
        bare.set("sub", .string("apple-bare"))
        bare = JSONObject(bare.members.filter { $0.name != "is_private_email" }.map { ($0.name, $0.value) })
        bare.set("real_user_status", .string("7"))
        let verdict = try object(try await server.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(try key.sign(bare))\"}"))
        #expect(verdict["is_private_email"] == .bool(false))
        #expect(verdict["real_user_status"] == .null)
    }

    @Test("drift: a changed discovery issuer, algorithm list or JWKS key types is reported and counted, and trusts nothing new")
    func drift() async throws {
        let rsa = try SharedTestKeys.rsa()
        let ec = try SharedTestKeys.p256()
        let changed = Locked(false)
        let idp = try FakeHTTPServer()
        defer { idp.stop() }
        let issuer = idp.baseURL
        idp.respond { request in
            let later = changed.withLock { $0 }
            if request.path == "/.well-known/openid-configuration" {
                let algs = later ? "[\"RS256\",\"ES256\"]" : "[\"RS256\"]"
                let documentIssuer = later ? "\(issuer)/moved\\n2026-01-01T00:00:00+0000 critical FORGED LINE \\u001b[31m" : issuer
                return .json("{\"issuer\":\"\(documentIssuer)\",\"jwks_uri\":\"\(issuer)/jwks\",\"id_token_signing_alg_values_supported\":\(algs)}")
            }
            if request.path == "/jwks" {
                let keys = later ? [rsa, ec] : [rsa]
                return .json((try? SharedTestKeys.jwks(keys)) ?? "{}", headers: [("Cache-Control", "max-age=1")])
            }
            return .json("{}", status: 404)
        }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            keys: { min_ttl_seconds: 1, max_ttl_seconds: 1 }
            providers:
              corp: { kind: oidc, issuer: "\(issuer)", audiences: ["api"], dev_idp: true }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        func token() throws -> String {
            try rsa.sign(JSONObject([("iss", .string(issuer)), ("aud", .string("api")), ("sub", .string("u1")), ("exp", .integer(now() + 600))]))
        }
        #expect(try await server.post("/v1/verify", "{\"provider\":\"corp\",\"token\":\"\(try token())\"}").status == 200)
        // The first watch of the discovery document (after the first key fetch, off its path) sets the baseline: the
        // change comes after it, however slowly this build runs (a sanitizer).
        for _ in 0..<200 where idp.count("/.well-known/openid-configuration") < 2 { try await Task.sleep(for: .milliseconds(50)) }
        try await Task.sleep(for: .milliseconds(300))
        changed.withLock { $0 = true }
        var drift: [JSONValue] = []
        for _ in 0..<150 where Set(drift.compactMap { $0.objectValue?["what"]?.stringValue }).count < 3 {
            try await Task.sleep(for: .milliseconds(100))
            let providers = try object(try await server.get("/v1/providers"))["providers"]?.arrayValue ?? []
            drift = providers.first?.objectValue?["drift"]?.arrayValue ?? []
        }
        let whats = Set(drift.compactMap { $0.objectValue?["what"]?.stringValue })
        #expect(whats.isSuperset(of: ["issuer", "algorithms", "key_types"]), "\(drift)")
        let issuerChange = drift.first { $0.objectValue?["what"]?.stringValue == "issuer" }?.objectValue
        #expect(issuerChange?["from"] == .string(issuer) && issuerChange?["to"]?.stringValue?.hasPrefix("\(issuer)/moved\n") == true)
        // What an upstream sends cannot forge a log line or send terminal escapes.
        #expect(!server.log().contains("\ncritical FORGED") && !server.log().contains("\u{1B}"))
        // What is trusted did not move with it: the configured issuer's tokens still verify, the moved one's do not.
        #expect(try await server.post("/v1/verify", "{\"provider\":\"corp\",\"token\":\"\(try token())\"}").status == 200)
        let moved = try rsa.sign(
            JSONObject([("iss", .string("\(issuer)/moved")), ("aud", .string("api")), ("sub", .string("u1")), ("exp", .integer(now() + 600))]))
        #expect(try await server.post("/v1/verify", "{\"provider\":\"corp\",\"token\":\"\(moved)\"}").status == 401)
        let metrics = String(decoding: try await server.get("/metrics").body, as: UTF8.self)
        #expect(metrics.contains(#"tokenguard_provider_drift_total{provider="corp",what="issuer"}"#))
    }
}
