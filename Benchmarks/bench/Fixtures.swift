import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// Realistic provider-shaped tokens (about 800 bytes) and the verifiers for them, generated in the run.
struct Fixture {
    let name: String
    let key: TestKey
    let token: String
    let nonce: String
    let verifier: TokenVerifier
    let now: Int64

    static func make(_ name: String, kind: SigningKey.Kind, algorithm: SignatureAlgorithm, pem: String? = nil) throws -> Fixture {
        let now = Verifiers.now
        let nonce = "bench-raw-nonce-\(name)"
        let key =
            try pem.map { TestKey(signingKey: try SigningKey(pem: $0), keyID: "bench-\(name)", algorithm: algorithm) }
            ?? TestKey(kind, keyID: "bench-\(name)", algorithm: algorithm)
        var policy: ProviderPolicy
        let claims: JSONObject
        switch name {
        case "RS256":
            // Apple-shaped.
            policy = Verifiers.apple()
            claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        case "PS256":
            policy = Verifiers.facebook()
            policy.algorithms = [.ps256]
            claims = ProviderTokens.facebookLimited(now: now, rawNonce: nonce)
        default:
            // Microsoft-shaped, under an OIDC policy allowing the algorithm.
            policy = Verifiers.microsoft()
            policy.algorithms = [algorithm]
            claims = ProviderTokens.microsoft(now: now, rawNonce: nonce)
        }
        let token = try key.sign(claims, extraHeader: [("typ", .string("JWT"))])
        let jwks = name == "RS256" || name == "PS256" ? try SharedTestKeys.jwks([key]) : try ProviderTokens.microsoftJWKS([key])
        let verifier = TokenVerifier(policy: policy, keySource: try InMemoryKeySource(jwks: jwks))
        guard case .success = verifier.verify(token: token, nonce: nonce, at: now) else { throw RunnerError("fixture \(name) does not verify") }
        return Fixture(name: name, key: key, token: token, nonce: nonce, verifier: verifier, now: now)
    }

    /// One fixture alone (a profile run makes only the keys it uses).
    /// With `pem` (a private key of the right type), the key is that one: RS256 tokens are then the same bytes on every
    /// run, so `perf stat -e instructions` counts are comparable between builds.
    static func named(_ name: String, pem: String? = nil) throws -> Fixture? {
        switch name {
        case "RS256": try make("RS256", kind: .rsa(bits: 2048), algorithm: .rs256, pem: pem)
        case "PS256": try make("PS256", kind: .rsa(bits: 2048), algorithm: .ps256, pem: pem)
        case "ES256": try make("ES256", kind: .ec(.p256), algorithm: .es256, pem: pem)
        case "EdDSA": try make("EdDSA", kind: .ed25519, algorithm: .edDSA, pem: pem)
        default: nil
        }
    }

    static func all() throws -> [Fixture] {
        [
            try make("RS256", kind: .rsa(bits: 2048), algorithm: .rs256),
            try make("PS256", kind: .rsa(bits: 2048), algorithm: .ps256),
            try make("ES256", kind: .ec(.p256), algorithm: .es256),
            try make("EdDSA", kind: .ed25519, algorithm: .edDSA),
        ]
    }
}
