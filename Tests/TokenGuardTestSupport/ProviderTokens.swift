import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService

/// Builds claims shaped like each provider's real ID tokens (see ../shared/PROVIDERS.md and real-tokens/).
package enum ProviderTokens {
    package static let appleAudience = "com.example.app"
    package static let facebookAudience = "1234567890"
    package static let microsoftAudience = "6731de76-14a6-49ae-97bc-6eba6914391e"
    package static let workTenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"

    /// Sign in with Apple identity token claims; the nonce claim is SHA-256 hex of `rawNonce` (Firebase style).
    package static func apple(now: Int64, rawNonce: String?, emailVerifiedAsString: Bool = false) -> JSONObject {
        var members: [(String, JSONValue)] = [
            ("iss", .string("https://appleid.apple.com")),
            ("aud", .string(appleAudience)),
            ("exp", .integer(now + 86_400)),
            ("iat", .integer(now)),
            ("sub", .string("001234.0123456789abcdef0123456789abcdef.1234")),
            ("c_hash", .string("Rk9Dy8hhoIHTGcSZUcnAaw")),
            ("email", .string("x1y2z3@privaterelay.appleid.com")),
            ("email_verified", emailVerifiedAsString ? .string("true") : .bool(true)),
            ("is_private_email", emailVerifiedAsString ? .string("true") : .bool(true)),
            ("auth_time", .integer(now)),
            ("nonce_supported", .bool(true)),
            ("real_user_status", .integer(2)),
        ]
        if let rawNonce { members.insert(("nonce", .string(SHA256.hexDigest(rawNonce.utf8))), at: 5) }
        return JSONObject(members)
    }

    /// Facebook Limited Login authentication token claims.
    package static func facebookLimited(now: Int64, rawNonce: String?, issuer: String = "https://www.facebook.com") -> JSONObject {
        var members: [(String, JSONValue)] = [
            ("iss", .string(issuer)),
            ("aud", .string(facebookAudience)),
            ("sub", .string("3944046265836837")),
            ("iat", .integer(now)),
            ("exp", .integer(now + 3600)),
            ("jti", .string("HVjz.702edc712493c87c517300719232725f11092cf95c784a076ed081182e1bbb03")),
            ("name", .string("Test User")),
            ("given_name", .string("Test")),
            ("family_name", .string("User")),
            ("email", .string("test\u{40}example.com")),
            ("picture", .string("https://platform-lookaside.fbsbx.com/platform/profilepic/?asid=1&height=100&width=100")),
        ]
        if let rawNonce { members.insert(("nonce", .string(SHA256.hexDigest(rawNonce.utf8))), at: 6) }
        return JSONObject(members)
    }

    /// Microsoft identity platform v2.0 ID token claims; the nonce is raw, as MSAL sends it.
    package static func microsoft(now: Int64, rawNonce: String?, tenant: String = workTenant) -> JSONObject {
        var members: [(String, JSONValue)] = [
            ("aud", .string(microsoftAudience)),
            ("iss", .string("https://login.microsoftonline.com/\(tenant)/v2.0")),
            ("iat", .integer(now)),
            ("nbf", .integer(now)),
            ("exp", .integer(now + 3900)),
            ("email", .string("user@contoso.example")),
            ("name", .string("Test User")),
            ("oid", .string("00000000-0000-0000-66f3-3332eca7ea81")),
            ("preferred_username", .string("user@contoso.example")),
            ("rh", .string("0.AXEAv4j5cvGGr0GRqy180BHbR3bepnYGFK5Jl7xuupFpE54BAAA.")),
            ("sub", .string("AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ")),
            ("tid", .string(tenant)),
            ("uti", .string("fqiBqXLPj0eQa82S-IYFAA")),
            ("ver", .string("2.0")),
        ]
        if let rawNonce { members.insert(("nonce", .string(rawNonce)), at: 5) }
        return JSONObject(members)
    }

    /// Microsoft signing keys carry an `issuer` property with the `{tenantid}` template.
    package static func microsoftJWKS(_ keys: [TestKey]) throws -> String {
        let entries: [JSONValue] = try keys.map { key in
            var jwk = try key.jwk(includeAlgorithm: false)
            jwk.set("x5t", .string(key.keyID))
            jwk.set("issuer", .string("https://login.microsoftonline.com/{tenantid}/v2.0"))
            return .object(jwk)
        }
        return JSONWriter.string(.object(JSONObject([("keys", .array(entries))])))
    }
}

/// Upstream answers of the opaque-token providers, as they send them.
package enum OpaqueTokenFixtures {
    /// GitHub's `404` for a token it does not know for the app (its REST error shape).
    package static let gitHubNotFound =
        #"{"message":"Not Found","documentation_url":"https://docs.github.com/rest/apps/oauth-applications#check-a-token","status":"404"}"#
}
