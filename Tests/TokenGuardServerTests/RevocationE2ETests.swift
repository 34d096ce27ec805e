import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// Revocations and Sign in with Apple notifications against the real binary: the SQLite store shared with
/// `tokenguard revoke`, the Redis store of a fleet, and failing closed when the store cannot be read.
@Suite(.serialized)
struct RevocationE2ETests {
    static let nonce = "revocation-nonce"
    static let subject = "001234.0123456789abcdef0123456789abcdef.1234"

    func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    func token(_ key: TestKey, issuedAt: Int64? = nil, subject: String = subject) throws -> String {
        var claims = ProviderTokens.apple(now: issuedAt ?? now(), rawNonce: Self.nonce)
        claims.set("sub", .string(subject))
        return try key.sign(claims)
    }

    func verifyBody(_ token: String) -> String { "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(Self.nonce)\"}" }

    func code(_ response: HTTPResponse) -> String? {
        (try? JSONParser.parseObject(response.body))?["error"]?.objectValue?["code"]?.stringValue
    }

    func config(_ workspace: TempWorkspace, key: TestKey, extra: String = "") throws -> String {
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        return try workspace.write(
            "tokenguard.yaml",
            """
            key_archive: "keys.sqlite"
            revocations: { max_staleness_seconds: 10 }
            \(extra)
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
            """)
    }

    /// A fresh token and its verify body with a nonce of its own (a nonce is single-use under replay protection).
    func fresh(_ key: TestKey, issuedAt: Int64? = nil, subject: String = "fresh.subject") throws -> String {
        let nonce = "n-\(UUID().uuidString)"
        var claims = ProviderTokens.apple(now: issuedAt ?? now(), rawNonce: nonce)
        claims.set("sub", .string(subject))
        return "{\"provider\":\"apple\",\"token\":\"\(try key.sign(claims))\",\"nonce\":\"\(nonce)\"}"
    }

    /// Polls until `condition` holds or `seconds` pass.
    func eventually(_ seconds: Double, _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }

    @Test("tokenguard revoke (SQLite) reaches a running server: cached verdicts, forward-auth and batch all refuse the subject's older tokens")
    func revokeThroughSQLite() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let config = try config(workspace, key: key)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        let old = try token(key, issuedAt: now() - 120)
        #expect(try await server.post("/v1/verify", verifyBody(old)).status == 200)  // now in the verified-token cache

        let revoked = try await BinaryRunner.run([
            "revoke", "--config", config, "--provider", "apple", "--subject", Self.subject, "--not-before", String(now() - 60),
        ])
        #expect(revoked.status == 0, "\(revoked.stderr)")
        #expect(try await eventually(5) { code(try await server.post("/v1/verify", verifyBody(old))) == "token_revoked" })
        let forward = try await RawHTTP.request(
            port: server.port, method: "GET", path: "/v1/authz/apple",
            headers: [("Authorization", "Bearer \(old)"), ("X-Tokenguard-Nonce", Self.nonce)])
        #expect(forward.status == 401 && forward.header("X-Tokenguard-Verdict") == "token_revoked")
        // A token issued after the revocation, and another subject's token, still verify.
        #expect(try await server.post("/v1/verify", verifyBody(try token(key))).status == 200)
        #expect(try await server.post("/v1/verify", verifyBody(try token(key, issuedAt: now() - 120, subject: "other.subject"))).status == 200)
        // The CLI batch reads the same store.
        let batch = try await BinaryRunner.run(["batch", "--config", config], stdin: verifyBody(old) + "\n")
        #expect(batch.stdout.contains("token_revoked"), "\(batch.stdout) \(batch.stderr)")
        // The record through the API, then removed: the old token verifies again.
        let record = try await server.get("/v1/revocations?provider=apple&subject=\(Self.subject)")
        #expect(record.status == 200)
        let removed = try await RawHTTP.request(port: server.port, method: "DELETE", path: "/v1/revocations?provider=apple&subject=\(Self.subject)")
        #expect(removed.status == 204)
        #expect(try await server.get("/v1/revocations?provider=apple&subject=\(Self.subject)").status == 404)
        #expect(try await server.post("/v1/verify", verifyBody(try token(key, issuedAt: now() - 100))).status == 200)
        #expect(!server.log().contains(Self.subject))
    }

    @Test("revocation writes: loopback peers without admin keys; with admin keys, only a configured key; bad input is 400")
    func adminWrites() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let open = try await ServerProcess(arguments: ["--config", try config(workspace, key: key)], workspace: workspace)
        let body = "{\"provider\":\"apple\",\"subject\":\"s-1\",\"not_before\":1700000000}"
        let recorded = try await open.post("/v1/revocations", body)
        #expect(recorded.status == 200)
        #expect(try JSONParser.parseObject(recorded.body)["not_before"] == .integer(1_700_000_000))
        for bad in [
            "{\"provider\":\"nope\",\"subject\":\"s\"}", "{\"provider\":\"apple\",\"subject\":\"\"}",
            "{\"provider\":\"apple\",\"subject\":\"a\\u0000b\"}",
            "{\"provider\":\"apple\",\"subject\":\"s\",\"not_before\":\"soon\"}", "{\"provider\":\"apple\",\"subject\":\"s\",\"extra\":1}",
            "{\"provider\":\"\u{212A}\",\"subject\":\"s\"}",
        ] {
            #expect(try await open.post("/v1/revocations", bad).status == 400, "\(bad)")
        }
        open.stop()

        let adminWorkspace = try TempWorkspace()
        let guarded = try await ServerProcess(
            arguments: ["--config", try config(adminWorkspace, key: key, extra: "server: { admin_keys_env: TG_ADMIN }")],
            environment: ["TG_ADMIN": "admin-key-0123456789abcdef"], workspace: adminWorkspace)
        defer { guarded.stop() }
        #expect(try await guarded.post("/v1/revocations", body).status == 403)
        #expect(try await guarded.post("/v1/revocations", body, headers: [("X-Tokenguard-Admin-Key", "wrong-key-0123456789abcdef")]).status == 403)
        let twice = [("X-Tokenguard-Admin-Key", "admin-key-0123456789abcdef"), ("X-Tokenguard-Admin-Key", "admin-key-0123456789abcdef")]
        #expect(try await guarded.post("/v1/revocations", body, headers: twice).status == 403)
        #expect(try await guarded.post("/v1/revocations", body, headers: [("X-Tokenguard-Admin-Key", "admin-key-0123456789abcdef")]).status == 200)
        #expect(try await RawHTTP.request(port: guarded.port, method: "DELETE", path: "/v1/revocations?provider=apple&subject=s-1").status == 403)
        #expect(guarded.log().contains("by=admin key"))
        // Query strings are read strictly: invalid UTF-8 and repeated names are refused, + is a space.
        for query in ["provider=apple&subject=%ff", "provider=apple&subject=a&subject=b", "provider=apple&subject=%zz"] {
            #expect(try await guarded.get("/v1/revocations?\(query)").status == 400, "\(query)")
        }
        #expect(!guarded.log().contains("admin-key-0123456789abcdef"))
    }

    func notification(
        _ key: TestKey, type: String, subject: String = subject, eventTime: Int64, audience: String = ProviderTokens.appleAudience,
        issuedAt: Int64?? = .some(nil)
    ) throws -> String {
        let events = JSONWriter.string(
            .object(JSONObject([("type", .string(type)), ("sub", .string(subject)), ("event_time", .integer(eventTime * 1000))])))
        var claims = JSONObject([("iss", .string("https://appleid.apple.com")), ("aud", .string(audience)), ("jti", .string(UUID().uuidString))])
        switch issuedAt {
        case .some(.some(let time)): claims.set("iat", .integer(time))
        case .some(.none): claims.set("iat", .integer(now()))
        case .none: break
        }
        claims.set("events", .string(events))
        return "{\"payload\":\"\(try key.sign(claims))\"}"
    }

    @Test("a notification waiting on a hanging key fetch is answered 503 request_timeout at the request timeout")
    func notificationTimeout() async throws {
        let setup = try await FetchedKeysServer.start(
            yaml:
                "http: { connect_timeout_ms: 500, timeout_ms: 60000 }\nserver: { request_timeout_seconds: 2 }\nrevocations: { max_staleness_seconds: 10 }"
        )
        defer { setup.stop() }
        let (server, idp, rotated) = (setup.server, setup.idp, setup.rotated)
        // From now on the IdP holds every fetch for 30 s; a notification signed with the key it has not published
        // makes the verification wait for a refetch.
        try setup.publishBoth(delay: 30)
        let started = Date()
        let response = try await server.post("/v1/notifications/apple", try notification(rotated, type: "account-delete", eventTime: now()))
        let took = Date().timeIntervalSince(started)
        #expect(response.status == 503, "\(String(decoding: response.body, as: UTF8.self))")
        #expect(code(response) == "request_timeout")
        #expect(took < 10, "answered after \(took) s; the request timeout is 2 s")
        #expect(idp.count("/jwks") >= 2, "the notification's unknown kid asked the IdP again")
    }

    @Test("Apple notifications: consent-revoked and account-delete revoke; email events are recorded only; forged or foreign payloads are 400")
    func appleNotifications() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let server = try await ServerProcess(
            arguments: ["--config", try config(workspace, key: key, extra: "server: { caller_keys_env: TG_CALLERS }")],
            environment: ["TG_CALLERS": "caller-key-0123456789abcdef"], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        let caller = [("X-Tokenguard-Key", "caller-key-0123456789abcdef")]
        let old = try token(key, issuedAt: now() - 300)
        let first = try await server.post("/v1/verify", verifyBody(old), headers: caller)
        #expect(first.status == 200, "\(first.status) \(String(decoding: first.body, as: UTF8.self)) \(server.log().suffix(2000))")

        // Apple cannot send our caller key: the notification endpoint is open, its signed payload is the credential.
        let disabled = try await server.post("/v1/notifications/apple", try notification(key, type: "email-disabled", eventTime: now() - 60))
        #expect(disabled.status == 200, "\(String(decoding: disabled.body, as: UTF8.self))")
        #expect(try JSONParser.parseObject(disabled.body)["type"] == .string("email-disabled"))
        #expect(try await server.post("/v1/verify", verifyBody(try token(key, issuedAt: now() - 300)), headers: caller).status == 200)

        let other = try SharedTestKeys.p256()
        let forged = try await server.post("/v1/notifications/apple", try notification(other, type: "account-delete", eventTime: now()))
        #expect(forged.status == 400 && ["unknown_key", "invalid_signature", "unsupported_algorithm"].contains(code(forged) ?? ""))
        let foreign = try await server.post(
            "/v1/notifications/apple", try notification(key, type: "account-delete", eventTime: now(), audience: "com.other.app"))
        #expect(foreign.status == 400 && code(foreign) == "invalid_audience")
        #expect(try await server.post("/v1/notifications/apple", "{\"payload\":\"not.a.jws\"}").status == 400)
        // Without iat, or older than a week: refused (a captured notification cannot be replayed for ever).
        #expect(
            try await server.post("/v1/notifications/apple", try notification(key, type: "account-delete", eventTime: now(), issuedAt: .none)).status
                == 400)
        let stale = try await server.post(
            "/v1/notifications/apple", try notification(key, type: "account-delete", eventTime: now(), issuedAt: .some(now() - 8 * 86_400)))
        #expect(stale.status == 400 && code(stale) == "token_expired")
        #expect(try await server.post("/v1/notifications/nope", try notification(key, type: "account-delete", eventTime: now())).status == 404)
        // An ID-token check refuses a notification payload (same keys, same audience, not a sign-in).
        let payload =
            try JSONParser.parseObject(Array(try notification(key, type: "account-delete", eventTime: now()).utf8))["payload"]?.stringValue ?? ""
        #expect(
            code(try await server.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(payload)\",\"nonce\":\"x\"}", headers: caller)) != nil)

        let revoke = try await server.post("/v1/notifications/apple", try notification(key, type: "consent-revoked", eventTime: now() - 60))
        #expect(revoke.status == 200)
        #expect(code(try await server.post("/v1/verify", verifyBody(old), headers: caller)) == "token_revoked")
        // Apple retries deliveries: the same notification again changes nothing, an older one never moves the time back.
        #expect(
            try await server.post("/v1/notifications/apple", try notification(key, type: "consent-revoked", eventTime: now() - 600)).status == 200)
        #expect(code(try await server.post("/v1/verify", verifyBody(try token(key, issuedAt: now() - 300)), headers: caller)) == "token_revoked")
        #expect(try await server.post("/v1/verify", verifyBody(try token(key)), headers: caller).status == 200)
        let metrics = String(decoding: try await server.get("/metrics").body, as: UTF8.self)
        #expect(metrics.contains(#"tokenguard_notifications_total{provider="apple",type="consent-revoked"}"#))
    }

    @Test("Redis store: a revocation written by one replica applies in another; an unreadable store fails closed (503), then recovers")
    func redisFleet() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let key = try SharedTestKeys.rsa()
        let extra = "replay: { store: redis, redis_url: \"\(redis.url)\" }\nrevocations: { store: redis, max_staleness_seconds: 1 }"
        let jwks = try TempWorkspace()
        let jwksPath = try jwks.write("jwks.json", try SharedTestKeys.jwks([key]))
        func replica() async throws -> ServerProcess {
            let workspace = try TempWorkspace()
            let config = try workspace.write(
                "tokenguard.yaml",
                """
                \(extra)
                providers:
                  apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwksPath)" }
                """)
            let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
            try await server.waitUntilReady()
            return server
        }
        let first = try await replica()
        defer { first.stop() }
        let second = try await replica()
        defer { second.stop() }
        #expect(try await first.post("/v1/revocations", "{\"provider\":\"apple\",\"subject\":\"\(Self.subject)\"}").status == 200)
        #expect(
            try await eventually(4) {
                code(try await second.post("/v1/verify", try fresh(key, issuedAt: now() - 60, subject: Self.subject))) == "token_revoked"
            })
        // A staleness window of 1 s: a sanitized replica that stalls past it answers 503 until its next poll.
        #expect(try await eventually(4) { try await second.post("/v1/verify", try fresh(key)).status == 200 })
        // Redis stops answering: within the staleness window plus a poll, every verification is 503, never a pass
        // (the cached, already-claimed path included: forward-auth claims nothing and still refuses).
        redis.signal(SIGSTOP)
        let body = try fresh(key)
        #expect(try await eventually(8) { code(try await second.post("/v1/verify", body)) == "revocation_store_unavailable" })
        let parsed = try JSONParser.parseObject(Array(body.utf8))
        let forward = try await RawHTTP.request(
            port: second.port, method: "GET", path: "/v1/authz/apple",
            headers: [("Authorization", "Bearer \(parsed["token"]?.stringValue ?? "")"), ("X-Tokenguard-Nonce", parsed["nonce"]?.stringValue ?? "")])
        #expect(forward.status == 503 && forward.header("X-Tokenguard-Verdict") == "revocation_store_unavailable")
        redis.signal(SIGCONT)
        var seen: [String] = []
        let recovered = try await eventually(8) {
            let response = try await second.post("/v1/verify", try fresh(key))
            seen.append("\(response.status) \(code(response) ?? "")")
            return response.status == 200
        }
        #expect(recovered, "\(Set(seen))")
    }
}
