import Foundation
import TokenGuardCore
import TokenGuardCrypto

/// The developer IdP's signing key and token minting: tokens shaped like Apple's, Facebook Limited Login's and
/// Microsoft's real ones (claims, key ids, nonce hashing), signed by a local key, so a team can test its sign-in
/// backend end to end without the real providers. Only a service that explicitly trusts the dev IdP accepts them.
package struct DevTokenMinter: Sendable {
    package let key: SigningKey
    package let keyID: String

    /// The tenant dev Microsoft tokens carry.
    package static let devTenant = "00000000-0000-4000-8000-00000000d3e5"
    package static let defaultAudiences: [ProviderKind: String] = [
        .apple: "com.example.app", .facebookLimited: "1234567890", .microsoft: "11111111-2222-4333-8444-555555555555",
    ]

    package init(key: SigningKey) throws {
        self.key = key
        let jwk = try key.publicJWK(keyID: "", algorithm: .rs256)
        // kid: the start of the key's RFC 7638 thumbprint, stable for the key.
        guard case .success(let parsed) = JWKParser.parse(jwk) else { throw DevIdPError("cannot parse the dev IdP key") }
        self.keyID = "dev-" + parsed.thumbprint.prefix(12)
    }

    /// Loads the key from `directory/signing-key.pem`, creating directory and key (RSA-2048) on first use.
    package static func load(directory: String) throws -> DevTokenMinter {
        let path = (directory as NSString).appendingPathComponent("signing-key.pem")
        if let data = FileManager.default.contents(atPath: path) {
            return try DevTokenMinter(key: try SigningKey(pem: String(decoding: data, as: UTF8.self)))
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let key = try SigningKey(generating: .rsa(bits: 2048))
        guard FileManager.default.createFile(atPath: path, contents: Data(try key.privateKeyPEM().utf8), attributes: [.posixPermissions: 0o600])
        else { throw DevIdPError("cannot write \(path)") }
        return try DevTokenMinter(key: key)
    }

    /// The dev IdP's JWKS document.
    package func jwks() throws -> String {
        var jwk = try key.publicJWK(keyID: keyID, algorithm: .rs256)
        jwk.set("issuer", .string(ProviderPolicy.microsoftIssuerTemplate))  // as Microsoft's keys carry
        return JSONWriter.string(.object(JSONObject([("keys", .array([.object(jwk)]))])))
    }

    /// Mints a token for `kind` with the provider's real claim shape. The nonce goes in as that provider does it:
    /// SHA-256 hex of the raw nonce for Apple and Facebook (Firebase style), raw for Microsoft.
    package func mint(
        kind: ProviderKind, audience: String? = nil, subject: String? = nil, rawNonce: String?, email: String? = nil,
        now: Int64 = Int64(Date().timeIntervalSince1970), lifetime: Int64? = nil
    ) throws -> String {
        let audience = audience ?? Self.defaultAudiences[kind] ?? "dev"
        var header: [(String, JSONValue)] = [("kid", .string(keyID)), ("alg", .string("RS256"))]
        var claims: [(String, JSONValue)]
        let hashedNonce = rawNonce.map { JSONValue.string(SHA256.hexDigest($0.utf8)) }
        switch kind {
        case .apple:
            claims = [
                ("iss", .string(ProviderPolicy.appleIssuer)), ("aud", .string(audience)), ("exp", .integer(now + (lifetime ?? 86_400))),
                ("iat", .integer(now)), ("sub", .string(subject ?? "000000.d3e5d3e5d3e5d3e5d3e5d3e5d3e5d3e5.0000")),
                ("c_hash", .string(Base64URL.encode(SHA256.hash("dev".utf8).prefix(16)))),
                ("email", .string(email ?? "dev.user@privaterelay.appleid.com")), ("email_verified", .bool(true)),
                ("is_private_email", .bool(true)), ("auth_time", .integer(now)), ("nonce_supported", .bool(true)),
                ("real_user_status", .integer(2)),
            ]
            if let hashedNonce { claims.insert(("nonce", hashedNonce), at: 5) }
        case .facebookLimited:
            header = [("alg", .string("RS256")), ("typ", .string("JWT")), ("kid", .string(keyID))]
            claims = [
                ("iss", .string("https://www.facebook.com")), ("aud", .string(audience)), ("sub", .string(subject ?? "10000000000000000")),
                ("iat", .integer(now)), ("exp", .integer(now + (lifetime ?? 3600))),
                ("jti", .string("dev." + Hex.lowercase(SHA256.hash("\(now)\(audience)".utf8)))), ("name", .string("Dev User")),
                ("given_name", .string("Dev")), ("family_name", .string("User")), ("email", .string(email ?? "dev.user@example.com")),
            ]
            if let hashedNonce { claims.insert(("nonce", hashedNonce), at: 6) }
        case .microsoft:
            header = [("typ", .string("JWT")), ("alg", .string("RS256")), ("kid", .string(keyID))]
            claims = [
                ("aud", .string(audience)), ("iss", .string("https://login.microsoftonline.com/\(Self.devTenant)/v2.0")), ("iat", .integer(now)),
                ("nbf", .integer(now)), ("exp", .integer(now + (lifetime ?? 3900))), ("email", .string(email ?? "dev.user@contoso.example")),
                ("name", .string("Dev User")), ("oid", .string(subject ?? "00000000-0000-0000-d3e5-000000000001")),
                ("preferred_username", .string(email ?? "dev.user@contoso.example")), ("sub", .string("d3e5AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")),
                ("tid", .string(Self.devTenant)), ("ver", .string("2.0")),
            ]
            if let rawNonce { claims.insert(("nonce", .string(rawNonce)), at: 5) }
        default:
            throw DevIdPError("the dev IdP mints apple, facebook_limited and microsoft tokens")
        }
        return try JWSSigner.sign(header: JSONObject(header), claims: JSONObject(claims), key: key, algorithm: .rs256)
    }
}

package struct DevIdPError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
