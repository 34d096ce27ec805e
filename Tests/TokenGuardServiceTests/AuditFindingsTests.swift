import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// The audit's other findings, each with the rule it broke.
struct AuditFindingsTests {
    let now = Verifiers.now
    let nonce = "audit-nonce"

    // MARK: Ed25519 public keys

    static let smallOrderEncodings: [String] = [
        "0100000000000000000000000000000000000000000000000000000000000000",  // identity
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  // order 2
        "0000000000000000000000000000000000000000000000000000000000000000",  // order 4
        "0000000000000000000000000000000000000000000000000000000000000080",  // order 4, other sign
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  // order 8
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    ]
    static let nonCanonicalEncodings: [String] = [
        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  // y = p
        "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  // y = p + 1
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    ]

    static func bytes(hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    @Test("small-order and non-canonical Ed25519 keys are skipped with the reason; tokens naming them say so")
    func ed25519KeysChecked() throws {
        var entries: [String] = []
        for (index, hex) in (Self.smallOrderEncodings + Self.nonCanonicalEncodings).enumerated() {
            entries.append("{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"bad-\(index)\",\"x\":\"\(Base64URL.encode(Self.bytes(hex: hex)))\"}")
        }
        let good = try SharedTestKeys.ed25519()
        let goodJWK = JSONWriter.string(.object(try good.jwk()))
        let keySet = try KeySet.parse(jwks: Array("{\"keys\":[\(entries.joined(separator: ",")),\(goodJWK)]}".utf8))
        #expect(keySet.keys.count == 1, "only the good key is usable")
        #expect(keySet.skipped.count == 11)
        for (index, skipped) in keySet.skipped.enumerated() {
            #expect(skipped.keyID == "bad-\(index)")
            #expect(skipped.reason.contains(index < 8 ? "small-order" : "non-canonical"), "\(skipped.reason)")
        }
        // A forged "signature" for the identity key (R = identity, S = 0) must not pass as a key at all.
        let policy = ProviderPolicy.oidc(name: "corp", issuer: "https://idp.example", audiences: ["api"])
        let verifier = TokenVerifier(policy: policy, keySource: InMemoryKeySource(keySet))
        let header = Base64URL.encode(Array("{\"alg\":\"EdDSA\",\"kid\":\"bad-0\"}".utf8))
        let payload = Base64URL.encode(Array("{\"iss\":\"https://idp.example\",\"aud\":\"api\",\"sub\":\"x\",\"exp\":\(now + 60)}".utf8))
        let forged = header + "." + payload + "." + Base64URL.encode(Self.bytes(hex: Self.smallOrderEncodings[0]) + [UInt8](repeating: 0, count: 32))
        let result = verifier.verify(token: forged, nonce: nil, at: now)
        #expect(result.code == .unknownKey)
        if case .failure(let error) = result { #expect(error.message.contains("skipped") && error.message.contains("small-order")) }
        // The good key still verifies.
        let token = try good.sign(
            JSONObject([("iss", .string("https://idp.example")), ("aud", .string("api")), ("sub", .string("s")), ("exp", .integer(now + 60))]))
        #expect(verifier.verify(token: token, nonce: nil, at: now).verdict != nil)
    }

    @Test("an unknown_key for a skipped kid names the reason (an RSA key under 2048 bits)")
    func skippedKidExplained() throws {
        let weak = try TestKey(.rsa(bits: 1024), keyID: "weak-1", algorithm: .rs256)
        let jwks = "{\"keys\":[\(JSONWriter.string(.object(try weak.jwk())))]}"
        let verifier = try Verifiers.make(Verifiers.apple(), jwks: jwks)
        let result = verifier.verify(token: try weak.sign(ProviderTokens.apple(now: now, rawNonce: nonce)), nonce: nonce, at: now)
        #expect(result.code == .unknownKey)
        guard case .failure(let error) = result else { return }
        #expect(error.message.contains("weak-1") && error.message.contains("skipped") && error.message.contains("below 2048"))
        let status = InMemoryKeySource(try KeySet.parse(jwks: Array(jwks.utf8))).status
        #expect(status.skippedKeys.map(\.keyID) == ["weak-1"])
    }

    // MARK: Explicit typing and azp

    @Test("typ: access tokens are invalid_token_type; no typ, JWT and application/jwt pass; token_types changes the list")
    func explicitTyping() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [key])
        let claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        for typ in ["at+jwt", "application/at+jwt", "AT+JWT", "Application/At+Jwt", "jwt ", "JWS", "\u{0130}WT"] {
            let token = try key.sign(claims, extraHeader: [("typ", .string(typ))])
            #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .invalidTokenType, "typ \(typ)")
            let explained = verifier.verifyExplaining(token: token, nonce: nonce, at: now)
            #expect(explained.result.code == .invalidTokenType)
            #expect(explained.explanation.checks.first { $0.name == "token-type" }?.ok == false)
        }
        for typ in ["JWT", "jwt", "application/jwt", "Application/JWT"] {
            #expect(
                verifier.verify(token: try key.sign(claims, extraHeader: [("typ", .string(typ))]), nonce: nonce, at: now).verdict != nil, "typ \(typ)"
            )
        }
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).verdict != nil)
        // A forged access token is still invalid_signature first: the signature is checked before the type.
        let forged = segments(try key.sign(claims, extraHeader: [("typ", .string("at+jwt"))]))
        #expect(verifier.verify(token: forged[0] + "." + forged[1] + ".AAAA", nonce: nonce, at: now).code == .invalidSignature)
        var custom = Verifiers.apple()
        custom.tokenTypes = ["at+jwt"]
        let accessVerifier = try Verifiers.make(custom, keys: [key])
        #expect(accessVerifier.verify(token: try key.sign(claims, extraHeader: [("typ", .string("AT+JWT"))]), nonce: nonce, at: now).verdict != nil)
        #expect(accessVerifier.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidTokenType)
        let config = try Configuration.parse(
            yaml: "providers:\n  corp: {kind: oidc, issuer: \"https://idp.example\", audiences: [api], token_types: [\"\", \"JWT\"]}\n")
        #expect(config.providers[0].policy?.tokenTypes == ["", "jwt"])
    }

    @Test("azp: when present it must be an authorized party (default: the audiences)")
    func authorizedParty() throws {
        let key = try SharedTestKeys.rsa()
        var claims = JSONObject([
            ("iss", .string("https://idp.example")), ("aud", .string("api")), ("sub", .string("s")), ("exp", .integer(now + 60)),
        ])
        var policy = ProviderPolicy.oidc(name: "corp", issuer: "https://idp.example", audiences: ["api"])
        let verifier = try Verifiers.make(policy, keys: [key])
        #expect(verifier.verify(token: try key.sign(claims), nonce: nil, at: now).verdict != nil, "no azp")
        claims.set("azp", .string("api"))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nil, at: now).verdict != nil)
        claims.set("azp", .string("android-client"))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nil, at: now).code == .invalidAudience)
        policy.authorizedParties = ["android-client"]
        #expect(try Verifiers.make(policy, keys: [key]).verify(token: try key.sign(claims), nonce: nil, at: now).verdict != nil)
        claims.set("azp", .integer(5))
        #expect(try Verifiers.make(policy, keys: [key]).verify(token: try key.sign(claims), nonce: nil, at: now).code == .malformedToken)
    }

    // MARK: Microsoft tenants

    @Test("microsoft needs tenants in a config; built-in defaults without TOKENGUARD_MICROSOFT_TENANTS refuse every tenant")
    func microsoftTenantsRequired() throws {
        #expect(throws: ConfigError.self) { try Configuration.parse(yaml: "providers:\n  microsoft: { audiences: [\"a\"] }\n") }
        do {
            _ = try Configuration.parse(yaml: "providers:\n  microsoft: { audiences: [\"a\"] }\n")
        } catch {
            #expect(error.key == "providers.microsoft.tenants")
        }
        #expect(
            try Configuration.parse(yaml: "providers:\n  microsoft: { audiences: [\"a\"], tenants: [\"*\"] }\n").providers[0].policy?.tenants == .any)
        let defaults = try Configuration.builtInDefaults(environment: ["TOKENGUARD_MICROSOFT_AUDIENCES": ProviderTokens.microsoftAudience])
        let policy = try #require(defaults.provider(named: "microsoft")?.policy)
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(policy, jwks: try ProviderTokens.microsoftJWKS([key]))
        let token = try key.sign(ProviderTokens.microsoft(now: now, rawNonce: nil))
        let result = verifier.verify(token: token, nonce: nil, at: now)
        #expect(result.code == .tenantNotAllowed)
        if case .failure(let error) = result { #expect(error.message.contains("TOKENGUARD_MICROSOFT_TENANTS")) }
        let allowed = try Configuration.builtInDefaults(environment: ["TOKENGUARD_MICROSOFT_TENANTS": ProviderTokens.workTenant])
        #expect(allowed.provider(named: "microsoft")?.policy?.tenants == .list([ProviderTokens.workTenant]))
    }

    @Test("provider names are ASCII and unique")
    func providerNames() throws {
        for yaml in [
            "providers:\n  \"appl\\u0065\u{301}\": { audiences: [a] }\n", "providers:\n  \"\u{212A}\": { kind: apple, audiences: [a] }\n",
            "providers:\n  1: { kind: apple, audiences: [a] }\n  \"1\": { kind: apple, audiences: [b] }\n",
        ] {
            #expect(throws: ConfigError.self, "\(yaml)") { try Configuration.parse(yaml: yaml) }
        }
    }

    // MARK: Discovery

    @Test("a discovered jwks_uri must be https on the issuer's host or a listed jwks_host; http only to a dev IdP's own host")
    func discoveredJWKSHosts() throws {
        func allowed(_ uri: String, _ issuer: String, hosts: [String] = [], dev: Bool = false) -> Bool {
            (try? OutboundURL.validateDiscoveredJWKS(uri, issuer: issuer, jwksHosts: hosts, devIdP: dev)) != nil
        }
        #expect(allowed("https://idp.example/keys", "https://idp.example"))
        #expect(allowed("https://IDP.example:443/keys", "https://idp.example"))
        #expect(!allowed("https://idp.example:8443/keys", "https://idp.example"), "another port is another service")
        #expect(!allowed("https://www.googleapis.com:8443/certs", "https://accounts.google.com", hosts: ["www.googleapis.com"]))
        #expect(!allowed("http://127.0.0.1:10/keys", "http://127.0.0.1:9", dev: true), "another port on the dev IdP's host")
        #expect(!allowed("https://idp.example:0/keys", "https://idp.example"))
        #expect(!allowed("https://idp.example:99999/keys", "https://idp.example"))
        #expect(!allowed("https://evil.example/keys", "https://idp.example"))
        #expect(!allowed("https://idp.example.evil.example/keys", "https://idp.example"))
        #expect(!allowed("https://idp.example@evil.example/keys", "https://idp.example"))
        #expect(!allowed("https://\u{212A}eys.example/keys", "https://keys.example"))
        #expect(allowed("https://www.googleapis.com/oauth2/v3/certs", "https://accounts.google.com", hosts: ["www.googleapis.com"]))
        #expect(!allowed("http://idp.example/keys", "https://idp.example"))
        #expect(!allowed("http://127.0.0.1:9/keys", "http://127.0.0.1:9"), "plain http needs dev_idp")
        #expect(allowed("http://127.0.0.1:9/keys", "http://127.0.0.1:9", dev: true))
        #expect(!allowed("http://localhost:9/keys", "http://127.0.0.1:9", dev: true), "only the issuer's own host")
        #expect(!allowed("ftp://idp.example/keys", "https://idp.example"))
    }

    // MARK: Upstream answers never reach a trap

    struct CannedFetcher: HTTPFetching {
        let response: HTTPResponse
        func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse { response }
    }

    @Test("GitHub: rate-limit headers and dates of any value are advisory or malformed, never a crash or a pass")
    func gitHubAnswers() async throws {
        func inspect(_ status: Int, headers: [(String, String)] = [], body: String = "") async -> VerificationResult {
            let inspector = GitHubTokenInspector(
                providerName: "github", clientID: "Iv1.abc", clientSecret: "s3cret",
                fetcher: CannedFetcher(response: HTTPResponse(status: status, headers: headers, body: Array(body.utf8))))
            return await inspector.inspect("gho_abc", now: Double(now))
        }
        for reset in ["nan", "inf", "-inf", "1e300", "-1e300", "99999999999999999999", "0x1p1000", "1.5", "-5", ""] {
            let result = await inspect(403, headers: [("x-ratelimit-reset", reset)])
            #expect(result.code == .keysUnavailable)
            if case .failure(let error) = result { #expect((1...3600).contains(error.retryAfterSeconds ?? 0)) }
            #expect(await inspect(429, headers: [("retry-after", reset)]).code == .keysUnavailable)
        }
        let user = "\"user\": {\"id\": 1, \"login\": \"octo\"}, \"app\": {\"client_id\": \"Iv1.abc\"}"
        #expect(await inspect(200, body: "{\(user)}").verdict != nil)
        #expect(await inspect(200, body: "{\(user), \"expires_at\": null}").verdict != nil)
        for bad in ["1e300", "12345", "true", "\"+2026-01-01T00:00:00Z\"", "\"2026-01-01T25:00:00Z\"", "\"garbage\"", "{}"] {
            #expect(await inspect(200, body: "{\(user), \"expires_at\": \(bad)}").code == .keysUnavailable, "expires_at \(bad)")
        }
        #expect(await inspect(200, body: "{\(user), \"expires_at\": \"2020-01-01T00:00:00Z\"}").code == .tokenExpired)
        let otherApp = "\"user\": {\"id\": 1, \"login\": \"octo\"}, \"app\": {\"client_id\": \"Iv1.\u{212A}\"}"
        #expect(await inspect(200, body: "{\(otherApp)}").code == .tokenInactive)
        #expect(await inspect(200, body: "{\"user\": {\"id\": 1, \"login\": \"octo\"}, \"app\": 5}").code == .keysUnavailable)
    }

    @Test("Graph: a present but malformed is_valid, app_id, expires_at or issued_at is keys_unavailable, never absent")
    func graphAnswers() async throws {
        func inspect(_ data: String) async -> VerificationResult {
            let inspector = FacebookLoginTokenInspector(
                providerName: "facebook_classic", appID: "123", appSecret: "s3cret",
                fetcher: CannedFetcher(response: HTTPResponse(status: 200, headers: [], body: Array("{\"data\": {\(data)}}".utf8))))
            return await inspector.inspect("EAAB", now: Double(now))
        }
        let base = "\"app_id\": \"123\", \"type\": \"USER\", \"user_id\": \"42\", \"is_valid\": true"
        #expect(await inspect(base).verdict != nil)
        #expect(await inspect(base + ", \"expires_at\": 0").verdict != nil)
        #expect(await inspect(base + ", \"expires_at\": \(now + 60)").verdict?.expiresAt == now + 60)
        for bad in ["-9223372036854775808", "1e300", "-1", "\"x\"", "true", "9223372036854775807", "1.5"] {
            #expect(await inspect(base + ", \"expires_at\": \(bad)").code == .keysUnavailable, "expires_at \(bad)")
            #expect(await inspect(base + ", \"issued_at\": \(bad)").code == .keysUnavailable, "issued_at \(bad)")
        }
        #expect(await inspect(base + ", \"expires_at\": \(now - 10)").code == .tokenExpired)
        #expect(await inspect("\"app_id\": \"123\", \"type\": \"USER\", \"user_id\": \"42\", \"is_valid\": \"true\"").code == .keysUnavailable)
        #expect(await inspect("\"app_id\": 123, \"type\": \"USER\", \"user_id\": \"42\", \"is_valid\": true").code == .keysUnavailable)
        #expect(await inspect("\"app_id\": \"124\", \"type\": \"USER\", \"user_id\": \"42\", \"is_valid\": true").code == .tokenInactive)
        #expect(await inspect("\"app_id\": \"123\", \"user_id\": \"42\", \"is_valid\": true").code == .keysUnavailable, "type missing")
        #expect(await inspect("\"app_id\": \"123\", \"type\": 1, \"user_id\": \"42\", \"is_valid\": true").code == .keysUnavailable)
        #expect(await inspect("\"app_id\": \"123\", \"type\": \"PAGE\", \"user_id\": \"42\", \"is_valid\": true").code == .tokenInactive)
    }

    @Test("Microsoft: email_verified only from xms_edov with an email; its own email_verified claim is ignored")
    func microsoftEmailTrust() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(Verifiers.microsoft(), jwks: try ProviderTokens.microsoftJWKS([key]))
        func verified(_ extra: [(String, JSONValue)], email: Bool = true) throws -> Bool? {
            var claims = ProviderTokens.microsoft(now: now, rawNonce: nil)
            claims.set("email", email ? .string("ceo@victim.example") : .null)
            if !email { claims = JSONObject(claims.members.filter { $0.name != "email" }.map { ($0.name, $0.value) }) }
            for (name, value) in extra { claims.set(name, value) }
            return verifier.verify(token: try key.sign(claims), nonce: nil, at: now).verdict?.emailVerified
        }
        #expect(try verified([("email_verified", .bool(true))]) == false, "nOAuth: Microsoft's email_verified is not trusted")
        #expect(try verified([]) == false)
        for edov in [JSONValue.bool(true), .string("1"), .string("true")] { #expect(try verified([("xms_edov", edov)]) == true) }
        for edov in [JSONValue.bool(false), .string("0"), .string("false"), .null, .integer(1), .string("TRUE")] {
            #expect(try verified([("xms_edov", edov)]) == false, "\(edov)")
        }
        #expect(try verified([("xms_edov", .bool(true)), ("email", .string(""))]) == false, "an empty email is no email")
        #expect(try verified([("xms_edov", .bool(true))], email: false) == false, "no email, nothing verified")
    }

    @Test("a payload carrying events (a provider notification) is never accepted as an ID token")
    func eventsRefused() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [key])
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("events", .string("{\"type\":\"consent-revoked\",\"sub\":\"x\",\"event_time\":1}"))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidTokenType)
        claims.set("events", .object(JSONObject([("type", .string("account-delete"))])))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidTokenType)
    }

    @Test("providers that accept the same tokens are named (serve warns: replay keys are per provider)")
    func overlappingProviders() throws {
        let config = try Configuration.parse(
            yaml: """
                providers:
                  apple: { audiences: ["com.example.app"] }
                  apple_web: { kind: apple, audiences: ["com.example.web", "com.example.app"] }
                  apple_other: { kind: apple, audiences: ["com.example.other"] }
                  corp: { kind: oidc, issuer: "https://idp.example", audiences: ["com.example.app"] }
                """)
        let pairs = config.providersAcceptingTheSameTokens.map { "\($0.0)+\($0.1)" }
        #expect(pairs == ["apple+apple_web"])
    }

    @Test("a Redis URL with a user or password is a config error (secrets never live in the file)")
    func redisURLWithoutCredentials() throws {
        #expect(throws: ConfigError.self) {
            try Configuration.parse(yaml: "replay: { store: redis, redis_url: \"redis://default:pw@127.0.0.1:6379\" }\n")
        }
        #expect(throws: ConfigError.self) { try Configuration.parse(yaml: "replay: { store: redis, redis_url: \"redis://user@127.0.0.1:6379\" }\n") }
        #expect(try Configuration.parse(yaml: "replay: { store: redis, redis_url: \"redis://127.0.0.1:6379\" }\n").replay != nil)
        #expect(throws: ConfigError.self, "a database index would be ignored") {
            try Configuration.parse(yaml: "replay: { store: redis, redis_url: \"redis://127.0.0.1:6379/5\" }\n")
        }
    }

    @Test("explain gives the verdict verify gives, from one pass, for valid and rejected tokens alike")
    func explainAgreesWithVerify() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [key])
        let good = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let parts = segments(good)
        var wrongAudience = ProviderTokens.apple(now: now, rawNonce: nonce)
        wrongAudience.set("aud", .string("other"))
        let tokens = [
            good, parts[0] + "." + parts[1] + ".AAAA", "a.b", good + "\u{212A}", try key.sign(wrongAudience),
            try key.sign(ProviderTokens.apple(now: now - 200_000, rawNonce: nonce)), try key.sign(ProviderTokens.apple(now: now, rawNonce: "other")),
        ]
        for token in tokens {
            for requestNonce in [nonce, nil] {
                let plain = verifier.verify(token: token, nonce: requestNonce, at: now)
                let explained = verifier.verifyExplaining(token: token, nonce: requestNonce, at: now)
                #expect(plain.code == explained.result.code)
                #expect(plain.verdict == explained.result.verdict)
            }
        }
    }

    // MARK: Identities are bytes

    @Test("provider drift is a change of bytes: a discovery issuer respelled with a KELVIN SIGN is drift")
    func driftByBytes() {
        let monitor = DriftMonitor(provider: "corp")
        monitor.observe("issuer", "https://idp.example/K", at: 1)
        monitor.observe("issuer", "https://idp.example/\u{212A}", at: 2)
        #expect("https://idp.example/K" == "https://idp.example/\u{212A}")
        #expect(monitor.changes.count == 1)
        monitor.observe("issuer", "https://idp.example/\u{212A}", at: 3)
        #expect(monitor.changes.count == 1, "the same bytes again are no change")
    }

    // MARK: Files that rotate

    @Test("a caller key or secret file rewritten with one of the same size and its time kept (cp -p) is read again")
    func secretFilesRotateByContent() async throws {
        let workspace = try TempWorkspace()
        let keys = try workspace.write("callers.txt", "first-caller-key-0001\n")
        let secret = try workspace.write("secret.txt", "first-secret-value\n")
        let kept = Date(timeIntervalSince1970: 1_700_000_000)
        for path in [keys, secret] { try FileManager.default.setAttributes([.modificationDate: kept], ofItemAtPath: path) }
        let callers = try CallerKeys(source: .file(path: keys), key: "server.caller_keys_file", environment: [:])
        let value = try SecretValue(file: secret, key: "app_secret_file")
        #expect(callers.allows("first-caller-key-0001") && value.current == "first-secret-value")
        try "other-caller-key-0002\n".write(toFile: keys, atomically: false, encoding: .utf8)
        try "other-secret-value\n".write(toFile: secret, atomically: false, encoding: .utf8)
        for path in [keys, secret] { try FileManager.default.setAttributes([.modificationDate: kept], ofItemAtPath: path) }
        try await Task.sleep(for: .milliseconds(1_100))  // files are looked at once a second at most
        #expect(!callers.allows("first-caller-key-0001"), "a removed caller key stops working")
        #expect(callers.allows("other-caller-key-0002"))
        #expect(value.current == "other-secret-value")
    }
}
