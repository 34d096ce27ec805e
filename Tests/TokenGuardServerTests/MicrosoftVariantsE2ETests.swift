import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// Microsoft as deployments meet it, against a fake authority on 127.0.0.1: tenants by domain name, a national
/// cloud's authority, v1 tokens, app-specific signing keys, and Entra External ID.
@Suite(.serialized)
struct MicrosoftVariantsE2ETests {
    static let contoso = "11111111-2222-4333-8444-555555555555"
    static let fabrikam = "99999999-8888-4777-8666-555555555555"
    static let stranger = "12345678-1234-4234-8234-123456789abc"
    static let app = ProviderTokens.microsoftAudience

    func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// A fake authority: common keys (issuer template of this authority), per-app keys, tenant discovery documents.
    /// `domains` maps a domain to its tenant; an unknown domain is Entra's 400 (AADSTS90002); `down` makes discovery 503.
    func authority(
        common: TestKey, appKey: TestKey, domains: [String: String], down: Locked<Bool>, bound: TestKey? = nil, htmlErrors: Bool = false
    ) throws -> FakeHTTPServer {
        let server = try FakeHTTPServer()
        let base = server.baseURL
        func jwks(_ key: TestKey, extra: TestKey? = nil) -> String {
            var jwk = (try? key.jwk(includeAlgorithm: false)) ?? JSONObject()
            jwk.set("issuer", .string("\(base)/{tenantid}/v2.0"))
            var keys: [JSONValue] = [.object(jwk)]
            if let extra {
                // A key bound to one tenant (the stranger's), as Entra publishes for some keys.
                var bound = (try? extra.jwk(includeAlgorithm: false)) ?? JSONObject()
                bound.set("issuer", .string("\(base)/\(Self.stranger)/v2.0"))
                keys.append(.object(bound))
            }
            return JSONWriter.string(.object(JSONObject([("keys", .array(keys))])))
        }
        let commonKeys = jwks(common, extra: bound)
        let appKeys = jwks(appKey)
        server.respond { request in
            if request.path == "/common/discovery/v2.0/keys" { return .json(commonKeys) }
            if request.path == "/common/discovery/v2.0/keys?appid=\(Self.app)" { return .json(appKeys) }
            if request.path.hasSuffix("/v2.0/.well-known/openid-configuration") {
                if down.withLock({ $0 }) {
                    return htmlErrors ? FakeHTTPServer.Response(status: 404, body: Array("<html>Not Found</html>".utf8)) : .json("{}", status: 503)
                }
                let domain = request.path.dropFirst().prefix { $0 != "/" }
                guard let tenant = domains[String(domain)] else {
                    return .json("{\"error\":\"invalid_tenant\",\"error_description\":\"AADSTS90002: Tenant '\(domain)' not found.\"}", status: 400)
                }
                return .json("{\"issuer\":\"\(base)/\(tenant)/v2.0\",\"jwks_uri\":\"\(base)/\(tenant)/discovery/v2.0/keys\"}")
            }
            return .json("{}", status: 404)
        }
        return server
    }

    func token(_ key: TestKey, tenant: String, issuer: String, version: String = "2.0") throws -> String {
        var claims = ProviderTokens.microsoft(now: now(), rawNonce: nil, tenant: tenant)
        claims.set("iss", .string(issuer))
        claims.set("ver", .string(version))
        return try key.sign(claims)
    }

    func verdict(_ server: ServerProcess, _ provider: String, _ token: String) async throws -> (Int, String?) {
        let response = try await server.post("/v1/verify", "{\"provider\":\"\(provider)\",\"token\":\"\(token)\"}")
        let object = try JSONParser.parseObject(response.body)
        return (response.status, object["error"]?.objectValue?["code"]?.stringValue)
    }

    @Test("tenants by domain name, national-cloud authority, v1 tokens and app signing keys")
    func entraVariants() async throws {
        let common = try SharedTestKeys.rsa()
        let appKey = try SharedTestKeys.key("app-key-1", .rsa(bits: 2048))
        let boundKey = try SharedTestKeys.key("bound-key-1", .rsa(bits: 2048))
        let down = Locked(false)
        let fake = try authority(
            common: common, appKey: appKey, domains: ["contoso.onmicrosoft.com": Self.contoso], down: down, bound: boundKey)
        defer { fake.stop() }
        let base = fake.baseURL
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              entra:
                kind: microsoft
                authority: "\(base)"
                dev_idp: true
                audiences: ["\(Self.app)"]
                tenants: ["Contoso.onmicrosoft.com", "\(Self.fabrikam)", "nope.onmicrosoft.com"]
                token_versions: [1, 2]
              entra_v2:
                kind: microsoft
                authority: "\(base)"
                dev_idp: true
                audiences: ["\(Self.app)"]
                tenants: ["\(Self.contoso)"]
              entra_app:
                kind: microsoft
                authority: "\(base)"
                dev_idp: true
                audiences: ["\(Self.app)"]
                tenants: ["*"]
                app_signing_keys: true
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        // Tenant names resolve through discovery after the server starts; until Contoso's has, its tokens are 503.
        let resolved = "\"tenant_id\":\"\(Self.contoso)\""
        for _ in 0..<400 where !String(decoding: try await server.get("/v1/providers").body, as: UTF8.self).contains(resolved) {
            try await Task.sleep(for: .milliseconds(50))
        }
        let v2 = "\(base)/{t}/v2.0"
        func issuer(_ tenant: String) -> String { v2.replacingOccurrences(of: "{t}", with: tenant) }

        // Resolved by name, listed by GUID, neither.
        #expect(try await verdict(server, "entra", try token(common, tenant: Self.contoso, issuer: issuer(Self.contoso))).0 == 200)
        #expect(try await verdict(server, "entra", try token(common, tenant: Self.fabrikam, issuer: issuer(Self.fabrikam))).0 == 200)
        #expect(try await verdict(server, "entra", try token(common, tenant: Self.stranger, issuer: issuer(Self.stranger))).1 == "tenant_not_allowed")
        // The public cloud's issuer is not this authority's.
        #expect(
            try await verdict(
                server, "entra", try token(common, tenant: Self.contoso, issuer: "https://login.microsoftonline.com/\(Self.contoso)/v2.0")
            ).1
                == "invalid_issuer")
        // v1 tokens where token_versions has 1 (the key's v2 issuer property is not compared), not elsewhere.
        let v1 = try token(common, tenant: Self.contoso, issuer: "https://sts.windows.net/\(Self.contoso)/", version: "1.0")
        #expect(try await verdict(server, "entra", v1).0 == 200)
        #expect(try await verdict(server, "entra_v2", v1).1 == "invalid_issuer")
        // A key bound to another tenant vouches for no v1 token of this one (nor any v2 token).
        let boundV1 = try token(boundKey, tenant: Self.contoso, issuer: "https://sts.windows.net/\(Self.contoso)/", version: "1.0")
        #expect(try await verdict(server, "entra", boundV1).1 == "invalid_issuer")
        #expect(try await verdict(server, "entra", try token(boundKey, tenant: Self.contoso, issuer: issuer(Self.contoso))).1 == "invalid_issuer")
        #expect(
            try await verdict(
                server, "entra", try token(common, tenant: Self.contoso, issuer: "https://sts.windows.net/\(Self.contoso)/", version: "2.0")
            ).1
                == "invalid_issuer")
        // App signing keys: only the per-app set is trusted for that provider.
        #expect(try await verdict(server, "entra_app", try token(appKey, tenant: Self.stranger, issuer: issuer(Self.stranger))).0 == 200)
        #expect(try await verdict(server, "entra_app", try token(common, tenant: Self.stranger, issuer: issuer(Self.stranger))).0 == 401)
        #expect(try await verdict(server, "entra_v2", try token(appKey, tenant: Self.contoso, issuer: issuer(Self.contoso))).0 == 401)

        let providers = String(decoding: try await server.get("/v1/providers").body, as: UTF8.self)
        #expect(providers.contains("\"name\":\"contoso.onmicrosoft.com\",\"tenant_id\":\"\(Self.contoso)\""))
        #expect(providers.contains("the authority knows no such tenant"))
    }

    @Test(
        "a tenant name the authority cannot resolve now (503, or a proxy's HTML 404): tokens outside the resolved set are 503, never a rejection",
        arguments: [false, true])
    func unresolvedName(htmlErrors: Bool) async throws {
        let common = try SharedTestKeys.rsa()
        let down = Locked(true)
        let fake = try authority(
            common: common, appKey: common, domains: ["contoso.onmicrosoft.com": Self.contoso], down: down, htmlErrors: htmlErrors)
        defer { fake.stop() }
        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              entra:
                kind: microsoft
                authority: "\(fake.baseURL)"
                dev_idp: true
                audiences: ["\(Self.app)"]
                tenants: ["contoso.onmicrosoft.com", "\(Self.fabrikam)"]
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        let issuer = { (tenant: String) in "\(fake.baseURL)/\(tenant)/v2.0" }
        #expect(try await verdict(server, "entra", try token(common, tenant: Self.fabrikam, issuer: issuer(Self.fabrikam))).0 == 200)
        let contoso = try await verdict(server, "entra", try token(common, tenant: Self.contoso, issuer: issuer(Self.contoso)))
        #expect(contoso.0 == 503 && contoso.1 == "keys_unavailable")
        #expect(try await verdict(server, "entra", try token(common, tenant: Self.stranger, issuer: issuer(Self.stranger))).1 == "keys_unavailable")
        // A token refused for what it is stays refused for that, undecided tenant or not.
        var expired = ProviderTokens.microsoft(now: now() - 7200, rawNonce: nil, tenant: Self.stranger)
        expired.set("iss", .string(issuer(Self.stranger)))
        #expect(try await verdict(server, "entra", try common.sign(expired)).1 == "token_expired")
        // The authority answers again: the name resolves on the next attempt (a restart reads it from the archive).
        down.withLock { $0 = false }
        let restarted = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { restarted.stop() }
        var resolved = false
        for _ in 0..<50 where !resolved {
            resolved = try await verdict(restarted, "entra", try token(common, tenant: Self.contoso, issuer: issuer(Self.contoso))).0 == 200
            if !resolved { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(resolved)
        #expect(
            try await verdict(restarted, "entra", try token(common, tenant: Self.stranger, issuer: issuer(Self.stranger))).1 == "tenant_not_allowed")
    }

    @Test("Entra External ID: the tenant's ciamlogin.com issuer and keys; other tenants and issuers refused")
    func externalID() async throws {
        let key = try SharedTestKeys.rsa()
        let workspace = try TempWorkspace()
        let jwks = try workspace.write("ciam.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              customers:
                kind: microsoft_external_id
                tenant_id: "\(Self.contoso)"
                tenant_subdomain: contoso
                audiences: ["\(Self.app)"]
                jwks_file: "\(jwks)"
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        let ciam = "https://\(Self.contoso).ciamlogin.com/\(Self.contoso)/v2.0"
        #expect(try await verdict(server, "customers", try token(key, tenant: Self.contoso, issuer: ciam)).0 == 200)
        let other = "https://\(Self.stranger).ciamlogin.com/\(Self.stranger)/v2.0"
        #expect(try await verdict(server, "customers", try token(key, tenant: Self.stranger, issuer: other)).1 == "tenant_not_allowed")
        #expect(try await verdict(server, "customers", try token(key, tenant: Self.contoso, issuer: other)).1 == "invalid_issuer")
        #expect(
            try await verdict(
                server, "customers", try token(key, tenant: Self.contoso, issuer: "https://login.microsoftonline.com/\(Self.contoso)/v2.0")
            ).1
                == "invalid_issuer")
        for authority in [
            "https://login.microsoftonline.com?x=1", "https://login.microsoftonline.com#f", "https://login.microsoftonline.com/x",
            "https://{tenantid}.example.com", "https://a{tenantid}", "https://login.microsoftonline.com:{tenantid}",
        ] {
            #expect(throws: ConfigError.self, "\(authority)") {
                try Configuration.parse(
                    yaml: "providers:\n  m: { kind: microsoft, audiences: [a], tenants: [\"*\"], authority: \"\(authority)\" }\n")
            }
        }
        let parsed = try Configuration.parse(
            yaml: """
                providers:
                  customers: { kind: microsoft_external_id, tenant_id: "\(Self.contoso)", tenant_subdomain: contoso, audiences: [a] }
                """)
        #expect(parsed.providers[0].keys == .jwksURL("https://contoso.ciamlogin.com/\(Self.contoso)/discovery/v2.0/keys"))
    }
}
