import Foundation
import Logging
import Synchronization
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// GitHub and classic Facebook Login tokens against real local servers speaking the providers' documented formats.
struct OpaqueTokenTests {
    static let clientID = "Iv1.8a61f9b3a7aba766"
    /// The inspection calls' timeout: the fake provider shares two loaded cores with every other test (a sanitizer's
    /// parallel run among them), so it is generous; the slow provider answers only after twice that.
    static let timeoutMilliseconds = 6_000
    static let clientSecret = "s3cr3t-github-client-secret-0123456789"
    static let appID = "1234567890"
    static let appSecret = "fb-app-secret-abcdef0123456789"
    static let now = Date().timeIntervalSince1970

    /// A fake api.github.com `POST /applications/{client_id}/token`.
    static func github(_ behaviour: @escaping @Sendable (String) -> FakeHTTPServer.Response) throws -> FakeHTTPServer {
        try FakeHTTPServer { request in
            let expected = "Basic " + Data("\(clientID):\(clientSecret)".utf8).base64EncodedString()
            guard request.method == "POST", request.path == "/applications/\(clientID)/token" else {
                return .json(OpaqueTokenFixtures.gitHubNotFound, status: 404)
            }
            guard request.headers["authorization"] == expected else {
                return .json("{\"message\":\"Requires authentication\",\"documentation_url\":\"https://docs.github.com/rest\"}", status: 401)
            }
            let token = (try? JSONParser.parseObject(request.body))?["access_token"]?.stringValue ?? ""
            return behaviour(token)
        }
    }

    static func githubAuthorization(token: String, expiresAt: String? = nil, appClientID: String = clientID) -> FakeHTTPServer.Response {
        .json(
            """
            {"id":1,"url":"https://api.github.com/authorizations/1","scopes":["read:user","user:email"],"token":"\(token)",
             "token_last_eight":"\(token.suffix(8))","hashed_token":"25f94a2a5c7fbaf499c665bc73d67c1c87e496da8985131633ee0a95819db2e8",
             "app":{"url":"http://my-github-app.com","name":"my github app","client_id":"\(appClientID)"},"note":null,"note_url":null,
             "updated_at":"2011-09-06T20:39:23Z","created_at":"2011-09-06T17:26:27Z","fingerprint":null,
             "expires_at":\(expiresAt.map { "\"\($0)\"" } ?? "null"),
             "user":{"login":"octocat","id":583231,"node_id":"MDQ6VXNlcjE=","type":"User","site_admin":false}}
            """)
    }

    static func githubVerifier(_ server: FakeHTTPServer, logger: Logger = Logger(label: "test"), cacheTTL: Double = 60) -> OpaqueTokenVerifier {
        var http = CurlHTTPClient.Configuration()
        http.totalTimeoutMilliseconds = Self.timeoutMilliseconds
        let inspector = GitHubTokenInspector(
            providerName: "github", clientID: clientID, clientSecret: clientSecret, apiURL: server.baseURL,
            fetcher: CurlHTTPClient(configuration: http))
        // The test's own clock: answers are built around `now`, so a slow run (ThreadSanitizer) cannot shift them.
        return OpaqueTokenVerifier(
            inspector: inspector, cache: OpaqueVerdictCache(positiveTTL: cacheTTL), logger: logger, clock: WallClock { Self.now })
    }

    @Test("GitHub: a token of this app verifies with user id, login, scopes; repeated checks are served from the cache")
    func githubValid() async throws {
        let server = try Self.github { token in
            token == "gho_valid123" ? Self.githubAuthorization(token: token) : .json(OpaqueTokenFixtures.gitHubNotFound, status: 404)
        }
        let verifier = Self.githubVerifier(server)
        let verdict = try #require(await verifier.verify(token: "gho_valid123").verdict)
        #expect(verdict.subject == "583231" && verdict.userID == "583231")
        #expect(verdict.claims["login"] == .string("octocat"))
        #expect(verdict.claims["scopes"] == .array([.string("read:user"), .string("user:email")]))
        #expect(verdict.expiresAt == nil)
        let json = JSONWriter.string(.object(verdict.json))
        #expect(!json.contains("gho_valid123") && !json.contains("hashed_token") && !json.contains("token_last_eight"))
        _ = await verifier.verify(token: "gho_valid123")
        #expect(server.count("/applications/\(Self.clientID)/token") == 1, "second check served from the cache")
    }

    @Test("GitHub: expiring tokens carry expires_at; an expired one is refused")
    func githubExpiry() async throws {
        let server = try Self.github { token in
            token == "ghu_future"
                ? Self.githubAuthorization(token: token, expiresAt: "2099-01-01T00:00:00Z")
                : Self.githubAuthorization(token: token, expiresAt: "2001-01-01T00:00:00Z")
        }
        let verifier = Self.githubVerifier(server)
        #expect(await verifier.verify(token: "ghu_future").verdict?.expiresAt == 4_070_908_800)
        #expect(await verifier.verify(token: "ghu_past").code == .tokenExpired)
    }

    @Test(
        "GitHub: inactive tokens and provider faults",
        arguments: [
            (
                "revoked", FakeHTTPServer.Response.json(OpaqueTokenFixtures.gitHubNotFound, status: 404),
                ErrorCode.tokenInactive
            ),
            (
                "revoked, Enterprise Server",
                FakeHTTPServer.Response.json(
                    #"{"message":"Not Found","documentation_url":"https://docs.github.com/enterprise-server@3.14/rest/apps/oauth-applications#check-a-token"}"#,
                    status: 404), .tokenInactive
            ),
            (
                "revoked, charset",
                FakeHTTPServer.Response(
                    status: 404, headers: [("Content-Type", "Application/JSON ; charset=utf-8")], body: Array(OpaqueTokenFixtures.gitHubNotFound.utf8)
                ),
                .tokenInactive
            ),
            (
                "validation",
                FakeHTTPServer.Response.json(
                    #"{"message":"Validation Failed","errors":[],"documentation_url":"https://docs.github.com/rest/apps/oauth-applications"}"#,
                    status: 422), .tokenInactive
            ),
            // Red team: a 404 or 422 that is not GitHub's own error (a proxy's page, a wrong api_url path, a gateway's
            // JSON) made every sign-in a rejection; it is an outage.
            (
                "404 html", FakeHTTPServer.Response(status: 404, headers: [("Content-Type", "text/html")], body: Array("<h1>404</h1>".utf8)),
                .keysUnavailable
            ),
            ("404 empty", FakeHTTPServer.Response(status: 404, body: []), .keysUnavailable),
            (
                "422 html", FakeHTTPServer.Response(status: 422, headers: [("Content-Type", "text/html")], body: Array("<p>no</p>".utf8)),
                .keysUnavailable
            ),
            ("404 gateway json", FakeHTTPServer.Response.json(#"{"message":"no Route matched with those values"}"#, status: 404), .keysUnavailable),
            (
                "404 GitHub's body as text/html",
                FakeHTTPServer.Response(status: 404, headers: [("Content-Type", "text/html")], body: Array(OpaqueTokenFixtures.gitHubNotFound.utf8)),
                .keysUnavailable
            ),
            // Red team: GitHub's own answer to an unknown route (a wrong api_url path) names the REST API's root.
            (
                "404 unknown route",
                FakeHTTPServer.Response.json(#"{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}"#, status: 404),
                .keysUnavailable
            ),
            (
                "404 as application/jsonp",
                FakeHTTPServer.Response(
                    status: 404, headers: [("Content-Type", "application/jsonp")], body: Array(OpaqueTokenFixtures.gitHubNotFound.utf8)),
                .keysUnavailable
            ),
            (
                "404 with a second Content-Type line",
                FakeHTTPServer.Response(
                    status: 404, headers: [("Content-Type", "text/html"), ("Content-Type", "application/json")],
                    body: Array(OpaqueTokenFixtures.gitHubNotFound.utf8)),
                .keysUnavailable
            ),
            (
                "404 documentation elsewhere",
                FakeHTTPServer.Response.json(#"{"message":"Not Found","documentation_url":"https://docs.github.com.evil.example/"}"#, status: 404),
                .keysUnavailable
            ),
            ("another app", Self.githubAuthorization(token: "x", appClientID: "Iv1.someoneelse"), .tokenInactive),
            ("500", FakeHTTPServer.Response.json("{\"message\":\"Server Error\"}", status: 500), .keysUnavailable),
            ("malformed", FakeHTTPServer.Response.json("{\"id\": ", status: 200), .keysUnavailable),
            ("slow", FakeHTTPServer.Response(body: Array("{}".utf8), delay: Double(Self.timeoutMilliseconds) / 500), .keysUnavailable),
        ])
    func githubFailures(name: String, response: FakeHTTPServer.Response, expected: ErrorCode) async throws {
        let server = try Self.github { _ in response }
        let result = await Self.githubVerifier(server).verify(token: "gho_test")
        #expect(result.code == expected, "\(name): \(result)")
    }

    @Test("GitHub: rate limiting is keys_unavailable with Retry-After from GitHub's headers")
    func githubRateLimit() async throws {
        let reset = Int(Self.now) + 120
        let limited = try Self.github { _ in
            .json(
                "{\"message\":\"API rate limit exceeded\"}", status: 403,
                headers: [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "\(reset)")])
        }
        guard case .failure(let error) = await Self.githubVerifier(limited).verify(token: "gho_test") else {
            Issue.record("rate limited must fail")
            return
        }
        #expect(error.code == .keysUnavailable)
        #expect((100...121).contains(error.retryAfterSeconds ?? 0), "\(String(describing: error.retryAfterSeconds))")
        let tooMany = try Self.github { _ in .json("{\"message\":\"slow down\"}", status: 429, headers: [("Retry-After", "30")]) }
        guard case .failure(let second) = await Self.githubVerifier(tooMany).verify(token: "gho_test") else { return }
        #expect(second.retryAfterSeconds == 30)
    }

    @Test("GitHub: our credentials refused is keys_unavailable; the secret appears in no log, error or verdict")
    func githubWrongCredentialsAndSecrecy() async throws {
        let logs = CapturedLogs()
        let server = try FakeHTTPServer { _ in .json("{\"message\":\"Bad credentials\"}", status: 401) }
        var http = CurlHTTPClient.Configuration()
        http.totalTimeoutMilliseconds = Self.timeoutMilliseconds
        let inspector = GitHubTokenInspector(
            providerName: "github", clientID: Self.clientID, clientSecret: Self.clientSecret, apiURL: server.baseURL,
            fetcher: CurlHTTPClient(configuration: http))
        let verifier = OpaqueTokenVerifier(inspector: inspector, logger: logs.logger, clock: WallClock { Self.now })
        let result = await verifier.verify(token: "gho_leaky")
        #expect(result.code == .keysUnavailable)
        let everything = logs.text + JSONWriter.string(.object(result.json(provider: "github"))) + "\(result)"
        #expect(!everything.contains(Self.clientSecret))
        #expect(!everything.contains("gho_leaky"), "the token is logged as a short hash only")
        #expect(logs.text.contains(TokenHash.short("gho_leaky")))
        #expect(!logs.text.isEmpty)
    }

    @Test("GitHub: a token that cannot be one is refused before any request")
    func githubShape() async throws {
        let server = try Self.github { token in Self.githubAuthorization(token: token) }
        let verifier = Self.githubVerifier(server)
        for token in ["", "gho_with space", "gho_\u{e9}", String(repeating: "a", count: 256), "gho/../../x"] {
            #expect(await verifier.verify(token: token).code == .malformedToken)
        }
        #expect(server.count("/applications/\(Self.clientID)/token") == 0)
    }

    @Test("negative answers are cached only briefly; outages not at all")
    func negativeCaching() async throws {
        let cache = OpaqueVerdictCache(positiveTTL: 60, negativeTTL: 3)
        cache.store("t", .failure(VerificationError(.tokenInactive, "x")), now: 100)
        #expect(cache.lookup("t", now: 102) != nil)
        #expect(cache.lookup("t", now: 103.5) == nil)
        cache.store("u", .failure(VerificationError(.keysUnavailable, "x")), now: 100)
        #expect(cache.lookup("u", now: 100) == nil)
        let verdict = Verdict(
            provider: "p", subject: "s", userID: "s", issuer: "i", audience: "a", expiresAt: 130, issuedAt: nil, keyID: nil, email: nil,
            emailVerified: false, tenantID: nil, claims: JSONObject())
        cache.store("v", .success(verdict), now: 100)
        #expect(cache.lookup("v", now: 129) != nil)
        #expect(cache.lookup("v", now: 131) == nil, "never past the token's own expiry")
        let small = OpaqueVerdictCache(capacity: 2)
        for name in ["a", "b", "c"] { small.store(name, .success(verdict), now: 100) }
        #expect(small.lookup("a", now: 101) == nil && small.lookup("c", now: 101) != nil, "bounded: oldest evicted")
    }

    // MARK: - Facebook

    /// A fake graph.facebook.com `GET /debug_token`, checking the app access token and appsecret_proof.
    static func graph(_ data: @escaping @Sendable (String) -> FakeHTTPServer.Response) throws -> FakeHTTPServer {
        try FakeHTTPServer { request in
            guard request.path.hasPrefix("/debug_token?") else {
                return .json("{\"error\":{\"message\":\"Unknown path\",\"type\":\"OAuthException\",\"code\":2500}}", status: 400)
            }
            var query: [String: String] = [:]
            for pair in request.path.dropFirst("/debug_token?".count).split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
                if parts.count == 2 { query[parts[0]] = parts[1].removingPercentEncoding }
            }
            let appToken = "\(appID)|\(appSecret)"
            let proof = Hex.lowercase(HMAC.sha256(key: Array(appSecret.utf8), message: Array(appToken.utf8)))
            guard query["access_token"] == appToken, query["appsecret_proof"] == proof else {
                return .json(
                    "{\"error\":{\"message\":\"Invalid appsecret_proof provided in the API argument\",\"type\":\"GraphMethodException\",\"code\":100,\"fbtrace_id\":\"A1\"}}",
                    status: 400)
            }
            return data(query["input_token"] ?? "")
        }
    }

    static func debugData(isValid: Bool = true, appID: String = appID, type: String = "USER", expiresAt: Int = Int(now) + 3600)
        -> FakeHTTPServer.Response
    {
        .json(
            """
            {"data":{"app_id":"\(appID)","type":"\(type)","application":"Test App","data_access_expires_at":\(Int(now) + 7_776_000),
             "expires_at":\(expiresAt),"is_valid":\(isValid),"issued_at":\(Int(now) - 60),"scopes":["public_profile","email"],
             "granular_scopes":[{"scope":"email"}],"user_id":"10153284926789012"}}
            """)
    }

    static func facebookVerifier(_ server: FakeHTTPServer, secret: String = appSecret) -> OpaqueTokenVerifier {
        var http = CurlHTTPClient.Configuration()
        http.totalTimeoutMilliseconds = Self.timeoutMilliseconds
        return OpaqueTokenVerifier(
            inspector: FacebookLoginTokenInspector(
                providerName: "facebook_classic", appID: appID, appSecret: secret, graphURL: server.baseURL,
                fetcher: CurlHTTPClient(configuration: http)), clock: WallClock { Self.now })
    }

    @Test("Facebook: a valid user token of this app verifies, with appsecret_proof")
    func facebookValid() async throws {
        let server = try Self.graph { _ in Self.debugData() }
        let verdict = try #require(await Self.facebookVerifier(server).verify(token: "EAAGm0PX4ZCpsBAValid").verdict)
        #expect(verdict.subject == "10153284926789012")
        #expect(verdict.claims["scopes"] == .array([.string("public_profile"), .string("email")]))
        #expect(verdict.expiresAt == Int64(Self.now) + 3600)
    }

    @Test(
        "Facebook: invalid, another app's, non-user, expired tokens and Graph faults",
        arguments: [
            ("invalid", Self.debugData(isValid: false), ErrorCode.tokenInactive, "not valid"),
            ("another app", Self.debugData(appID: "999"), .tokenInactive, "another Facebook app"),
            ("page token", Self.debugData(type: "PAGE"), .tokenInactive, "not a user"),
            ("expired", Self.debugData(expiresAt: 1_000_000_000), .tokenExpired, "expired"),
            (
                "graph error",
                FakeHTTPServer.Response.json("{\"error\":{\"message\":\"An unknown error\",\"type\":\"OAuthException\",\"code\":1}}", status: 500),
                .keysUnavailable, "OAuthException"
            ),
            ("malformed", FakeHTTPServer.Response.json("<html>"), .keysUnavailable, "unreadable"),
            ("slow", FakeHTTPServer.Response(body: Array("{}".utf8), delay: Double(Self.timeoutMilliseconds) / 500), .keysUnavailable, "timeout"),
        ])
    func facebookFailures(name: String, response: FakeHTTPServer.Response, expected: ErrorCode, message: String) async throws {
        let server = try Self.graph { _ in response }
        guard case .failure(let error) = await Self.facebookVerifier(server).verify(token: "EAAGtoken") else {
            Issue.record("\(name) must fail")
            return
        }
        #expect(error.code == expected, "\(name): \(error)")
        #expect(error.message.contains(message), "\(name): \(error.message)")
    }

    @Test("Facebook: a Graph error's type and code are quoted capped in bytes, however long the upstream made them")
    func facebookGraphErrorEchoIsBounded() async throws {
        let type = "OAuth" + String(repeating: "\u{301}", count: 20_000)
        let code = "[" + Array(repeating: "1", count: 20_000).joined(separator: ",") + "]"
        let body = "{\"error\":{\"message\":\"m\",\"type\":\"\(type)\",\"code\":\(code)}}"
        let server = try Self.graph { _ in FakeHTTPServer.Response.json(body, status: 500) }
        guard case .failure(let error) = await Self.facebookVerifier(server).verify(token: "EAAGtoken") else {
            Issue.record("a Graph error must fail")
            return
        }
        #expect(error.code == .keysUnavailable)
        #expect(error.message.utf8.starts(with: "Graph error (OAuth".utf8), "\(error.message.excerpt(bytes: 40))")
        #expect(error.message.utf8.count < 200, "\(error.message.utf8.count) bytes")
    }

    @Test("Facebook: a wrong app secret (bad appsecret_proof) is keys_unavailable, and the secret is never echoed")
    func facebookWrongSecret() async throws {
        let server = try Self.graph { _ in Self.debugData() }
        let result = await Self.facebookVerifier(server, secret: "wrong-secret-value").verify(token: "EAAGtoken")
        #expect(result.code == .keysUnavailable)
        #expect(!"\(result)".contains("wrong-secret-value"))
    }
}

/// Captures log lines in memory so a test can check what was (and was not) logged.
final class CapturedLogs: Sendable {
    private let lines = Locked<[String]>([])
    var text: String { lines.withLock { $0.joined(separator: "\n") } }

    var logger: Logger {
        Logger(label: "captured") { _ in CapturingHandler(sink: self) }
    }

    func append(_ line: String) { lines.withLock { $0.append(line) } }

    struct CapturingHandler: LogHandler {
        let sink: CapturedLogs
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            sink.append("\(event.level) \(event.message) \(metadata.merging(event.metadata ?? [:]) { $1 })")
        }
    }
}
