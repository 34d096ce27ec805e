import Foundation
import JWTKit
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// vapor/jwt-kit 5 on the same tokens: keys added once, `verify` of a payload checking expiry (at the pinned
/// time), then the same issuer, audience and nonce comparisons tokenguard makes.
struct JWTKitPeer {
    struct Payload: JWTPayload {
        var iss: IssuerClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        var sub: SubjectClaim
        var nonce: String?

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp.verifyNotExpired(currentDate: Date(timeIntervalSince1970: TimeInterval(Verifiers.now)))
        }
    }

    let keys: JWTKeyCollection
    let token: String
    let issuer: String
    let audience: String
    let expectedNonce: String?

    init(fixture: Fixture) async throws {
        let pem = try fixture.key.signingKey.publicKeyPEM()
        let collection = JWTKeyCollection()
        let kid = JWKIdentifier(string: fixture.key.keyID)
        switch fixture.name {
        case "RS256": await collection.add(rsa: try Insecure.RSA.PublicKey(pem: pem), digestAlgorithm: .sha256, kid: kid)
        case "PS256": await collection.add(pss: try Insecure.RSA.PublicKey(pem: pem), digestAlgorithm: .sha256, kid: kid)
        case "ES256": await collection.add(ecdsa: try ES256PublicKey(pem: pem), kid: kid)
        default:
            let x = Base64URL.encode(try fixture.key.signingKey.ed25519PublicBytes())
            await collection.add(eddsa: try EdDSA.PublicKey(x: x, curve: .ed25519), kid: kid)
        }
        keys = collection
        token = fixture.token
        let claims = try JSONParser.parseObject(Base64URL.decode(String(segments(fixture.token)[1])) ?? [])
        issuer = claims["iss"]?.stringValue ?? ""
        audience = claims["aud"]?.stringValue ?? ""
        let nonceClaim = claims["nonce"]?.stringValue
        expectedNonce = nonceClaim
        // Sanity: jwt-kit must accept the token before it is timed.
        guard await verify() else { throw RunnerError("jwt-kit rejects the \(fixture.name) fixture") }
    }

    func verify() async -> Bool {
        guard let payload = try? await keys.verify(token, as: Payload.self) else { return false }
        return payload.iss.value == issuer && payload.aud.value.contains(audience) && payload.nonce == expectedNonce
    }
}
