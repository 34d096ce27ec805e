import Foundation
import Hummingbird
import JWTKit
import TokenGuardCrypto

/// The server a team would write instead of running tokenguard: Hummingbird with a Codable request, jwt-kit's
/// verification (RS256, expiry), the same issuer, audience and SHA-256 nonce checks, a Codable verdict. No token
/// cache. `bench --jwtkit-serve-child PEM KID ISSUER AUDIENCE PORT` runs it until SIGTERM.
enum JWTKitServer {
    struct VerifyRequest: Decodable {
        let provider: String
        let token: String
        let nonce: String?
    }

    struct Payload: JWTPayload {
        var iss: IssuerClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        var sub: SubjectClaim
        var nonce: String?

        func verify(using algorithm: some JWTAlgorithm) async throws { try exp.verifyNotExpired() }
    }

    struct Verdict: ResponseEncodable {
        let valid: Bool
        let provider: String
        let subject: String
        let issuer: String
        let audience: String
    }

    static func serve(pemPath: String, keyID: String, issuer: String, audience: String, port: Int) async throws {
        let keys = JWTKeyCollection()
        let pem = try String(contentsOfFile: pemPath, encoding: .utf8)
        await keys.add(rsa: try Insecure.RSA.PublicKey(pem: pem), digestAlgorithm: .sha256, kid: JWKIdentifier(string: keyID))
        let router = Router()
        router.get("/healthz") { _, _ in "ok" }
        router.post("/v1/verify") { request, context -> Response in
            let body = try await request.decode(as: VerifyRequest.self, context: context)
            guard let payload = try? await keys.verify(body.token, as: Payload.self), payload.iss.value == issuer,
                payload.aud.value.contains(audience),
                payload.nonce == body.nonce.map({ SHA256.hexDigest($0.utf8) })
            else { return Response(status: .unauthorized) }
            let verdict = Verdict(valid: true, provider: body.provider, subject: payload.sub.value, issuer: payload.iss.value, audience: audience)
            return try verdict.response(from: request, context: context)
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)))
        try await app.runService()
    }
}
