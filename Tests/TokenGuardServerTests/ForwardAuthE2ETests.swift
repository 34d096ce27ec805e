import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// `/v1/authz/{provider}` against the real binary: directly (the shape Envoy and Traefik send) and behind a real nginx.
@Suite(.serialized)
struct ForwardAuthE2ETests {
    static let nonce = "forward-auth-nonce"
    static let claimHeaders = "{x-user-id: user_id, x-email: email, x-groups: claims.groups, x-tenant-id: tenant_id}"

    func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    func appleToken(_ key: TestKey, change: (inout JSONObject) -> Void = { _ in }) throws -> String {
        var claims = ProviderTokens.apple(now: now(), rawNonce: Self.nonce)
        claims.set("groups", .array([.string("admins"), .string("ops\r\nx-evil: 1")]))
        change(&claims)
        return try key.sign(claims)
    }

    func forged(_ token: String) -> String {
        var parts = token.split(separator: ".").map(String.init)
        let payload = String(decoding: Base64URL.decode(parts[1]) ?? [], as: UTF8.self).replacingOccurrences(of: "001234.", with: "666666.")
        parts[1] = Base64URL.encode(Array(payload.utf8))
        return parts.joined(separator: ".")
    }

    /// A config with `apple` (enforce, replay on), `apple_shadow` (shadow) and `apple_down` (keys unreachable).
    func config(_ workspace: TempWorkspace, key: TestKey, callerKeys: Bool = false, extra: String = "") throws -> String {
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let closed = try FreeLoopbackPort.pick()
        return try workspace.write(
            "tokenguard.yaml",
            """
            replay: { store: memory }
            \(callerKeys ? "server: { caller_keys_env: TG_CALLER_KEYS }" : "")
            providers:
              apple:
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_file: "\(jwks)"
                forward_auth: { claim_headers: \(Self.claimHeaders) }
              apple_shadow:
                kind: apple
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_file: "\(jwks)"
                replay: false
                forward_auth: { mode: shadow, claim_headers: \(Self.claimHeaders) }
              apple_down:
                kind: apple
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_url: "http://127.0.0.1:\(closed)/jwks"
                dev_idp: true
            \(extra)
            """)
    }

    func check(_ server: ServerProcess, _ method: String = "GET", _ path: String, _ headers: [(String, String)]) async throws -> RawHTTP.Response {
        try await RawHTTP.request(port: server.port, method: method, path: path, headers: headers)
    }

    func bearer(_ token: String, nonce: String? = nonce) -> [(String, String)] {
        [("Authorization", "Bearer \(token)")] + (nonce.map { [("X-Tokenguard-Nonce", $0)] } ?? [])
    }

    @Test("direct checks: any method and any path below the provider, claim headers, 401s, 404, 503, no replay claim")
    func directChecks() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        // A provider named "unknown", in shadow mode: names that are not configured are still counted as enforce's 404s.
        let unknown = """
              unknown:
                kind: apple
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_file: "\(workspace.url.appendingPathComponent("jwks.json").path)"
                forward_auth: { mode: shadow }
            """
        let server = try await ServerProcess(arguments: ["--config", try config(workspace, key: key, extra: unknown)], workspace: workspace)
        defer { server.stop() }
        let token = try appleToken(key)

        // Envoy's shape: the original method and path below the prefix, content-length 0; it answers like the plain path.
        let plain = try await check(server, "GET", "/v1/authz/apple", bearer(token))
        #expect(plain.status == 200, "\(plain.body)")
        #expect(plain.body.isEmpty)
        for (method, path) in [("DELETE", "/v1/authz/apple/api/orders?id=7"), ("POST", "/v1/authz/apple/"), ("PROPFIND", "/v1/authz/apple/a/b/../c")]
        {
            let response = try await check(server, method, path, bearer(token) + [("Content-Length", "0")])
            #expect(response.status == 200, "\(method) \(path): \(response.status) \(response.body)")
            #expect(response.headers.map(\.name) == plain.headers.map(\.name))
        }
        #expect(plain.header("X-Tokenguard-Verdict") == "valid")
        #expect(plain.header("X-Tokenguard-Provider") == "apple")
        #expect(plain.header("x-user-id") == "001234.0123456789abcdef0123456789abcdef.1234")
        #expect(plain.header("x-email") == "x1y2z3@privaterelay.appleid.com")
        #expect(plain.header("Cache-Control") == "no-store")
        // An identity that verifies but cannot be sent (1,024 control characters: 6 KiB written) fails the check: no
        // upstream gets a verified request without its x-user-id (red team 23).
        let unsendable = try await check(
            server, "GET", "/v1/authz/apple", bearer(try appleToken(key) { $0.set("sub", .string(String(repeating: "\u{1}", count: 1024))) }))
        #expect(unsendable.status == 401 && unsendable.header("X-Tokenguard-Verdict") == "malformed_token", "\(unsendable.status)")
        #expect(unsendable.header("x-user-id") == nil)
        #expect(plain.values("x-groups") == [#"["admins","ops\u000d\u000ax-evil: 1"]"#])
        #expect(plain.values("x-evil").isEmpty)
        #expect(plain.values("x-tenant-id").isEmpty)  // absent claim: no header

        // The same bearer token on every request: forward-auth never claims it; /v1/verify still can, once.
        for _ in 0..<3 { await #expect(try check(server, "GET", "/v1/authz/apple/x", bearer(token)).status == 200) }
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(Self.nonce)\"}"
        #expect(try await server.post("/v1/verify", body).status == 200)
        #expect(try await server.post("/v1/verify", body).status == 401)
        await #expect(try check(server, "GET", "/v1/authz/apple/x", bearer(token)).status == 200)

        // Refusals: 401 with RFC 6750 WWW-Authenticate and a JSON body.
        let expired = try appleToken(key) { $0.set("exp", .integer(now() - 3600)) }
        let wrongAudience = try appleToken(key) { $0.set("aud", .string("com.other.app")) }
        for (token, code) in [(forged(token), "invalid_signature"), (expired, "token_expired"), (wrongAudience, "invalid_audience")] {
            let response = try await check(server, "GET", "/v1/authz/apple/x", bearer(token))
            #expect(response.status == 401)
            #expect(response.header("WWW-Authenticate") == "Bearer error=\"invalid_token\", error_description=\"\(code)\"")
            #expect(response.header("X-Tokenguard-Verdict") == code)
            #expect(response.header("Cache-Control") == "no-store")
            #expect(try JSONParser.parseObject(Array(response.body.utf8))["error"]?.objectValue?["code"]?.stringValue == code)
            #expect(response.values("x-user-id").isEmpty)
        }
        let missing = try await check(server, "GET", "/v1/authz/apple/x", [])
        #expect(missing.status == 401)
        #expect(missing.header("WWW-Authenticate") == "Bearer realm=\"tokenguard\"")
        #expect(try JSONParser.parseObject(Array(missing.body.utf8))["error"]?.objectValue?["code"]?.stringValue == "token_missing")
        await #expect(try check(server, "GET", "/v1/authz/apple", bearer(token, nonce: "wrong")).header("X-Tokenguard-Verdict") == "nonce_mismatch")
        let twice = try await check(server, "GET", "/v1/authz/apple", bearer(token) + [("authorization", "Bearer \(token)")])
        #expect(twice.status == 401 && twice.header("X-Tokenguard-Verdict") == "malformed_token")
        let huge = try await check(server, "GET", "/v1/authz/apple", [("Authorization", "Bearer " + String(repeating: "a", count: 16 * 1024 + 1))])
        #expect(huge.status == 401 && huge.header("X-Tokenguard-Verdict") == "token_too_large")
        // Unknown providers, look-alike names and paths that only resemble the prefix.
        var notFound: RawHTTP.Response? = nil
        for path in [
            "/v1/authz/nope", "/v1/authz/APPLE", "/v1/authz/%61pple", "/v1/authz/", "/v1/authz", "/v1/authz/./apple", "/v1/authz/../authz/apple",
        ] {
            let response = try await check(server, "GET", path, bearer(token))
            #expect(response.status == 404, "\(path)")
            notFound = response
        }
        await #expect(try check(server, "GET", "/v1/authzapple", bearer(token)).status == 404)
        // Keys unreachable: 503 with Retry-After, never a 401.
        let down = try await check(server, "GET", "/v1/authz/apple_down/x", bearer(token))
        #expect(down.status == 503)
        #expect(down.header("Retry-After") != nil)
        #expect(down.header("X-Tokenguard-Verdict") == "keys_unavailable")
        // Shadow: always 200, the would-be verdict, claim headers only when valid.
        let shadowValid = try await check(server, "GET", "/v1/authz/apple_shadow/x", bearer(token))
        #expect(shadowValid.status == 200 && shadowValid.header("X-Tokenguard-Verdict") == "valid" && shadowValid.header("x-user-id") != nil)
        let shadowForged = try await check(server, "GET", "/v1/authz/apple_shadow/x", bearer(forged(token)))
        #expect(shadowForged.status == 200 && shadowForged.header("X-Tokenguard-Verdict") == "invalid_signature")
        #expect(shadowForged.values("x-user-id").isEmpty)
        await #expect(try check(server, "GET", "/v1/authz/apple_shadow/x", []).header("X-Tokenguard-Verdict") == "token_missing")
        // HEAD: headers only, and the connection stays usable.
        let head = try await check(server, "HEAD", "/v1/authz/apple/x", bearer(forged(token)))
        #expect(head.status == 401 && head.body.isEmpty)
        // No claim header can take the name of a field tokenguard itself puts on an answer (a second Cache-Control
        // beside no-store, say: red team 60), whatever the answer.
        let configured = Set(["x-user-id", "x-email", "x-groups", "x-tenant-id"])
        for answer in [plain, unsendable, missing, down, shadowValid, shadowForged, head, twice, huge, try #require(notFound)] {
            for field in answer.headers where !configured.contains(field.name.lowercased()) {
                #expect(throws: ClaimHeaderError.self, "\(field.name)") { try ClaimHeader.make(name: field.name, source: .userID).get() }
            }
        }

        // Every series is made at start: their values, not their presence, say what was counted.
        let metrics = String(decoding: try await server.get("/metrics").body, as: UTF8.self)
        func count(_ labels: String) -> Int? {
            let prefix = "tokenguard_forward_auth_total{\(labels)} "
            return metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) }
        }
        #expect(count(#"provider="apple_shadow",mode="shadow",outcome="invalid_signature""#) == 1)
        #expect((count(#"provider="apple",mode="enforce",outcome="valid""#) ?? 0) >= 1)
        #expect(count(#"provider="unknown",mode="enforce",outcome="unknown_provider""#) == 7)
        #expect(count(#"provider="unknown",mode="shadow",outcome="unknown_provider""#) == 0)
        #expect(!server.log().contains(token))
    }

    @Test("the body is never read: a check announcing a large body that never comes is answered at once")
    func bodyNeverRead() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let server = try await ServerProcess(arguments: ["--config", try config(workspace, key: key)], workspace: workspace)
        defer { server.stop() }
        // Never ready as a whole (apple_down's keys are unreachable): apple answers 200 once its first key load and
        // revocations read are done (the listener opens before them).
        let probe = try appleToken(key) { $0.set("sub", .string("readiness.probe")) }
        for _ in 0..<400 where try await check(server, "GET", "/v1/authz/apple", bearer(probe)).status != 200 {
            try await Task.sleep(for: .milliseconds(50))
        }
        let token = try appleToken(key)
        let head = "POST /v1/authz/apple/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nX-Tokenguard-Nonce: \(Self.nonce)\r\n"
        let (text, firstByte, closed) = try await RawHTTP.exchange(
            port: server.port, Array((head + "Content-Length: 10000000\r\n\r\npartial").utf8), timeout: 8)
        #expect(text.hasPrefix("HTTP/1.1 200"), "\(text.prefix(200))")
        #expect((firstByte ?? 99) < 4, "answered at once, not after the body (it never comes)")
        #expect(try RawHTTP.parse(text).header("Connection") == "close")
        // And the connection does end, as the answer says (at the latest 5 s later): the upload is not read and thrown
        // away for as long as it comes.
        #expect(closed, "the connection is closed after the answer")
        #expect(server.process.isRunning)
    }

    @Test("debug logs name the check's provider, never the client's URL or query")
    func debugLogs() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let server = try await ServerProcess(
            arguments: ["--config", try config(workspace, key: key)], environment: ["TOKENGUARD_LOG_LEVEL": "debug"], workspace: workspace)
        defer { server.stop() }
        _ = try await check(
            server, "GET", "/v1/authz/apple/callback/SECRETPATH?code=OAUTHCODE123&access_token=QUERYTOKEN", bearer(try appleToken(key)))
        _ = try await server.get("/healthz?probe=QUERYSECRET")
        try await Task.sleep(for: .milliseconds(200))
        let log = server.log()
        #expect(log.contains("/v1/authz/apple"))
        for secret in ["SECRETPATH", "OAUTHCODE123", "QUERYTOKEN", "QUERYSECRET"] { #expect(!log.contains(secret), "\(secret)") }
    }

    @Test("caller keys: forward-auth needs X-Tokenguard-Key like every /v1/ request")
    func callerKeys() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let server = try await ServerProcess(
            arguments: ["--config", try config(workspace, key: key, callerKeys: true)],
            environment: ["TG_CALLER_KEYS": "gateway-key-0123456789abcdef"],
            workspace: workspace)
        defer { server.stop() }
        let token = try appleToken(key)
        await #expect(try check(server, "GET", "/v1/authz/apple/x", bearer(token)).status == 403)
        await #expect(
            try check(server, "GET", "/v1/authz/apple/x", bearer(token) + [("X-Tokenguard-Key", "wrong-key-0123456789abcdef")]).status == 403)
        await #expect(
            try check(server, "GET", "/v1/authz/apple/x", bearer(token) + [("X-Tokenguard-Key", "gateway-key-0123456789abcdef")]).status == 200)
    }

    @Test("an opaque provider behind forward-auth: shape-checked before any call, answers cached, calls bounded (503 over the bound)")
    func opaqueProvider() async throws {
        let calls = Locked(0)
        let github = try FakeHTTPServer()
        defer { github.stop() }
        github.respond { request in
            calls.withLock { $0 += 1 }
            let token = (try? JSONParser.parseObject(request.body))?["access_token"]?.stringValue ?? ""
            guard token.hasPrefix("gho_valid") else { return .json(OpaqueTokenFixtures.gitHubNotFound, status: 404) }
            return FakeHTTPServer.Response(
                status: 200, headers: [("Content-Type", "application/json")],
                body: Array(
                    """
                    {"id":1,"token":"\(token)","scopes":["read:user"],"app":{"client_id":"Iv1.abc","name":"x","url":"http://x"},\
                    "expires_at":null,"user":{"login":"octocat","id":583231,"type":"User"}}
                    """.utf8), delay: token.hasPrefix("gho_validslow") ? 3 : 0)
        }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              github:
                client_id: "Iv1.abc"
                client_secret_env: TG_GH
                api_url: "\(github.baseURL)"
                dev_idp: true
                max_concurrent_inspections: 2
                max_inspections_per_second: 5
                forward_auth: { claim_headers: {x-user-id: user_id, x-login: claims.login} }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], environment: ["TG_GH": "gh-secret"], workspace: workspace)
        defer { server.stop() }
        // Not a GitHub token's shape: refused without a call.
        for bad in ["not a token", "gho_" + String(repeating: "a", count: 300), "gho_abc\u{212A}"] {
            await #expect(try check(server, "GET", "/v1/authz/github/x", [("Authorization", "Bearer \(bad)")]).status == 401)
        }
        #expect(calls.withLock { $0 } == 0)
        let valid = try await check(server, "GET", "/v1/authz/github/x", [("Authorization", "Bearer gho_valid123")])
        #expect(valid.status == 200, "\(valid.body)")
        #expect(valid.header("x-user-id") == "583231")
        #expect(valid.header("x-login") == "octocat")
        for _ in 0..<5 { await #expect(try check(server, "GET", "/v1/authz/github/x", [("Authorization", "Bearer gho_valid123")]).status == 200) }
        #expect(calls.withLock { $0 } == 1)
        // A nonce header to an opaque provider is a refusal (401), never a 400 a gateway would turn into a 500.
        let withNonce = try await check(server, "GET", "/v1/authz/github/x", [("Authorization", "Bearer gho_valid123"), ("X-Tokenguard-Nonce", "n")])
        #expect(withNonce.status == 401 && withNonce.header("X-Tokenguard-Verdict") == "invalid_request")
        // A flood of made-up tokens: at most 5 calls a second reach the provider; the rest are 503, not 401.
        try await Task.sleep(for: .seconds(1.2))
        let before = calls.withLock { $0 }
        var statuses: [Int] = []
        let floodStarted = Date()
        for index in 0..<20 {
            await statuses.append(try check(server, "GET", "/v1/authz/github/x", [("Authorization", "Bearer gho_made_up_\(index)")]).status)
        }
        // The bucket holds one second's worth and refills at 5 a second while the flood lasts (longer on a slow,
        // sanitized build): that many calls, and not one more.
        let allowed = 5 + Int((Date().timeIntervalSince(floodStarted) * 5).rounded(.up))
        let made = calls.withLock { $0 } - before
        #expect(made <= allowed, "\(made) calls, \(allowed) allowed")
        #expect(statuses.filter { $0 == 503 }.count >= 20 - allowed, "\(statuses)")
        #expect(Set(statuses).isSubset(of: [401, 503]))
        // Concurrency: with two slow calls in flight, a third is 503 at once.
        try await Task.sleep(for: .seconds(1.2))
        let beforeSlow = calls.withLock { $0 }
        // (The slow checks go through the curl client's own threads: blocking sockets would hold the test's executor.)
        async let slow1 = server.get("/v1/authz/github", headers: [("Authorization", "Bearer gho_validslow1")])
        async let slow2 = server.get("/v1/authz/github", headers: [("Authorization", "Bearer gho_validslow2")])
        // Both slow calls have reached GitHub (counted on arrival) before the third is sent: a sanitized server may
        // take longer than any fixed pause to send them.
        for _ in 0..<200 where calls.withLock({ $0 }) - beforeSlow < 2 { try await Task.sleep(for: .milliseconds(25)) }
        let third = try await check(server, "GET", "/v1/authz/github/x", [("Authorization", "Bearer gho_validslow3")])
        #expect(third.status == 503 && third.header("Retry-After") != nil)
        #expect(try await slow1.status == 200)
        #expect(try await slow2.status == 200)
    }

    // MARK: - Behind a real nginx

    /// nginx with `auth_request` to tokenguard (the snippets in deploy/nginx), in front of an upstream that records
    /// every request it gets.
    func nginxAndUpstream(
        _ server: ServerProcess, callerKey: String?, workspace: TempWorkspace
    ) async throws -> (NginxProcess, FakeHTTPServer, Locked<[FakeHTTPServer.Request]>) {
        let seen = Locked<[FakeHTTPServer.Request]>([])
        let upstream = try FakeHTTPServer { request in
            seen.withLock { $0.append(request) }
            return .json("{\"upstream\":true}")
        }
        let snippets = NginxProcess.snippets
        let nginx = try await NginxProcess(
            http: """
                upstream tokenguard { server 127.0.0.1:\(server.port); keepalive 8; }
                upstream app { server 127.0.0.1:\(upstream.port); }
                """,
            server: { _ in
                """
                large_client_header_buffers 4 32k;
                set $tokenguard_caller_key "\(callerKey ?? "")";
                include \(snippets)/tokenguard-auth.conf;
                location /apple/ { set $tokenguard_provider apple; include \(snippets)/tokenguard-protect.conf; proxy_pass http://app; }
                location /shadow/ { set $tokenguard_provider apple_shadow; include \(snippets)/tokenguard-protect.conf; proxy_pass http://app; }
                location /down/ { set $tokenguard_provider apple_down; include \(snippets)/tokenguard-protect.conf; proxy_pass http://app; }
                """
            }, workspace: workspace)
        return (nginx, upstream, seen)
    }

    func throughNginx(callerKey: String?) async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let environment = callerKey.map { ["TG_CALLER_KEYS": $0] } ?? [:]
        let server = try await ServerProcess(
            arguments: ["--config", try config(workspace, key: key, callerKeys: callerKey != nil)], environment: environment, workspace: workspace)
        defer { server.stop() }
        let (nginx, upstream, seen) = try await nginxAndUpstream(server, callerKey: callerKey, workspace: workspace)
        defer {
            nginx.stop()
            upstream.stop()
        }
        func get(_ path: String, _ headers: [(String, String)]) async throws -> RawHTTP.Response {
            try await RawHTTP.request(port: nginx.port, method: "GET", path: path, headers: headers)
        }
        let token = try appleToken(key)
        let spoofed: [(String, String)] = [
            ("X-User-Id", "admin"), ("X-Email", "ceo@example.com"), ("X-Tenant-Id", "evil"), ("X-Tokenguard-Verdict", "valid"),
            ("X-Tokenguard-Provider", "apple"), ("X-Groups", "[\"admins\"]"),
        ]

        // Valid: the upstream sees the identity from the check, and none of the client's own identity headers.
        let ok = try await get("/apple/orders?id=7", bearer(token) + spoofed)
        #expect(ok.status == 200, "\(ok.status) \(ok.body) \(nginx.errorLog())")
        let request = try #require(seen.withLock { $0.last })
        #expect(request.headers["x-user-id"] == "001234.0123456789abcdef0123456789abcdef.1234")
        #expect(request.headers["x-email"] == "x1y2z3@privaterelay.appleid.com")
        #expect(request.headers["x-tokenguard-verdict"] == "valid")
        #expect(request.headers["x-groups"] == #"["admins","ops\u000d\u000ax-evil: 1"]"#)
        for name in ["x-user-id", "x-email", "x-tokenguard-verdict", "x-tokenguard-provider", "x-groups"] {
            #expect(request.occurrences(of: name) == 1, "\(name)")
        }
        #expect(request.occurrences(of: "x-tenant-id") == 0)  // the token has no tenant; the client's is dropped
        #expect(request.occurrences(of: "x-evil") == 0)
        #expect(request.occurrences(of: "x-tokenguard-key") == 0)
        #expect(request.occurrences(of: "x-tokenguard-nonce") == 0)

        // Forged, expired, wrong audience, no token: 401 from nginx, and the upstream is never called.
        let calls = seen.withLock { $0.count }
        let expired = try appleToken(key) { $0.set("exp", .integer(now() - 3600)) }
        let wrongAudience = try appleToken(key) { $0.set("aud", .string("com.other.app")) }
        for (token, code) in [(forged(token), "invalid_signature"), (expired, "token_expired"), (wrongAudience, "invalid_audience")] {
            let response = try await get("/apple/orders", bearer(token) + spoofed)
            #expect(response.status == 401, "\(code): \(response.status)")
            #expect(response.header("WWW-Authenticate") == "Bearer error=\"invalid_token\", error_description=\"\(code)\"")
        }
        let missing = try await get("/apple/orders", spoofed)
        #expect(missing.status == 401)
        #expect(missing.header("WWW-Authenticate") == "Bearer realm=\"tokenguard\"")
        // IdP down: tokenguard's 503 becomes nginx's 500 (auth_request passes only 2xx, 401 and 403).
        await #expect(try get("/down/orders", bearer(token)).status == 500)
        #expect(seen.withLock { $0.count } == calls)

        // Shadow: the upstream is called with the would-be verdict and no identity, whatever the client sent.
        let shadow = try await get("/shadow/orders", bearer(forged(token)) + spoofed)
        #expect(shadow.status == 200)
        let shadowed = try #require(seen.withLock { $0.last })
        #expect(shadowed.headers["x-tokenguard-verdict"] == "invalid_signature")
        #expect(shadowed.occurrences(of: "x-tokenguard-verdict") == 1)
        for name in ["x-user-id", "x-email", "x-tenant-id", "x-groups"] { #expect(shadowed.occurrences(of: name) == 0, "\(name)") }
        #expect(seen.withLock { $0.count } == calls + 1)

        // Bytes nginx accepts but tokenguard's parser would refuse (raw UTF-8 in the URL, control bytes in a header)
        // never reach the check: a valid token is still 200 and a forged one 401, never nginx's 500.
        await #expect(try get("/apple/caf\u{E9}?q=\u{E9}", bearer(token)).status == 200)
        await #expect(try get("/apple/x", bearer(token) + [("X-Other", "a\u{1}b")]).status == 200)
        await #expect(try get("/apple/caf\u{E9}", bearer(forged(token))).status == 401)
        await #expect(try get("/shadow/caf\u{E9}", bearer(forged(token))).status == 200)
        // Two Authorization headers: nginx refuses the request itself; the upstream is not called.
        let beforeTwo = seen.withLock { $0.count }
        await #expect(try get("/apple/x", bearer(token) + [("Authorization", "Bearer \(forged(token))")]).status == 400)
        #expect(seen.withLock { $0.count } == beforeTwo)
        // The upstream gets the real peer address, not the client's claim to one.
        await #expect(try get("/apple/x", bearer(token) + [("X-Real-IP", "6.6.6.6")]).status == 200)
        #expect(try #require(seen.withLock { $0.last }).headers["x-real-ip"] == "127.0.0.1")

        // The check goes to tokenguard with the gateway's caller key; a client cannot supply or replace it.
        if callerKey != nil {
            let direct = try await RawHTTP.request(port: server.port, method: "GET", path: "/v1/authz/apple", headers: bearer(token))
            #expect(direct.status == 403)
            await #expect(try get("/apple/orders", bearer(token) + [("X-Tokenguard-Key", "client-made-up-key")]).status == 200)
        }
    }

    @Test("nginx auth_request: valid, forged, expired, wrong audience, no token, IdP down, shadow, spoofed headers")
    func nginx() async throws { try await throughNginx(callerKey: nil) }

    @Test("nginx auth_request with caller keys on: the gateway adds X-Tokenguard-Key")
    func nginxWithCallerKeys() async throws { try await throughNginx(callerKey: "nginx-gateway-key-0123456789abcdef") }
}
