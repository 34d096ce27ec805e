import Testing
import TokenGuardCore
import TokenGuardService

/// The `forward_auth` block: what a config may say, and what it may not.
struct ForwardAuthConfigTests {
    func parse(_ block: String, provider: String = "apple: { audiences: [a], jwks_file: k.json, ") throws -> Configuration {
        try Configuration.parse(yaml: "providers:\n  \(provider)forward_auth: \(block) }\n")
    }

    @Test("defaults without the block; every setting read; names lower-cased")
    func settings() throws {
        let plain = try Configuration.parse(yaml: "providers:\n  apple: { audiences: [a], jwks_file: k.json }\n")
        #expect(plain.providers[0].forwardAuth == ForwardAuthPolicy())
        let policy = try parse(
            "{token_header: X-Id-Token, token_cookie: id_token, nonce_header: X-Nonce, mode: shadow, claim_headers: {X-User-Id: user_id, x-groups: claims.groups}}"
        ).providers[0].forwardAuth
        #expect(policy.tokenHeader == "x-id-token")
        #expect(policy.tokenCookie == "id_token")
        #expect(policy.nonceHeader == "x-nonce")
        #expect(policy.mode == .shadow)
        #expect(policy.claimHeaders.map(\.name) == ["x-user-id", "x-groups"])
        #expect(policy.claimHeaders.map(\.source) == [.userID, .claim(["groups"])])
        let cookieOnly = try parse("{token_header: null, token_cookie: tg}").providers[0].forwardAuth
        #expect(cookieOnly.tokenHeader == nil && cookieOnly.tokenCookie == "tg")
        let github = try Configuration.parse(
            yaml: "providers:\n  github: { client_id: Iv1.abc, client_secret_env: S, forward_auth: { claim_headers: {x-login: claims.login} } }\n",
            environment: ["S": "secret"])
        #expect(github.providers[0].forwardAuth.claimHeaders.map(\.name) == ["x-login"])
    }

    @Test("refused at load: bad names, reserved names, duplicates in any case, unknown sources, no token source, unknown keys")
    func refusals() throws {
        for block in [
            "{claim_headers: {x-user-id: user_id, X-User-ID: subject}}", "{claim_headers: {connection: user_id}}",
            "{claim_headers: {transfer-encoding: user_id}}", "{claim_headers: {x-tokenguard-verdict: user_id}}",
            "{claim_headers: {\"x user\": user_id}}", "{claim_headers: {\"x-üser\": user_id}}", "{claim_headers: {\"x\\r\\ny\": user_id}}",
            "{claim_headers: {x-user: password}}", "{claim_headers: {x-user: claims.}}", "{claim_headers: {x-user: [user_id]}}",
            "{claim_headers: {authorization: user_id}}", "{claim_headers: {x-tokenguard-nonce: user_id}}",
            "{nonce_header: x-id, token_header: x-id}", "{claim_headers: {x-id: user_id}, token_header: x-id}", "{token_header: null}",
            "{mode: audit}", "{token_header: \"bad header\"}", "{token_cookie: \"a;b\"}", "{claim_header: {}}", "[]",
            "{token_header: x-tokenguard-key}", "{token_header: cookie}", "{nonce_header: cookie}", "{nonce_header: x-tokenguard-key}",
            "{nonce_header: authorization}", "{token_header: host}", "{claim_headers: {x-accel-redirect: claims.path}}",
            "{claim_headers: {x-forwarded-for: user_id}}", "{claim_headers: {x-real-ip: user_id}}",
        ] {
            #expect(throws: ConfigError.self, "\(block)") { try parse(block) }
        }
        for name in [".", ".."] {
            #expect(throws: ConfigError.self, "\(name)") {
                try Configuration.parse(yaml: "providers:\n  \"\(name)\": { kind: apple, audiences: [a] }\n")
            }
        }
    }
}
