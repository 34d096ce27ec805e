import Foundation
import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// Real provider-signed tokens (../shared/real-tokens/), verified with the key set published alongside them.
/// They are expired, so the clock is pinned inside [iat, exp). Their nonces were sent raw by their apps, so the
/// policies here compare the nonce raw.
struct RealTokenTests {
    struct RealToken: Decodable {
        let provider: String
        let token: String
        let iat: Int64
        let exp: Int64
        let aud: String
        let iss: String
        let nonce: String?
    }

    static func files() throws -> [String] {
        try TestPaths.sharedFiles(in: "real-tokens").map(\.lastPathComponent).filter { $0.hasSuffix(".json") }
    }

    static func load(_ name: String) throws -> (RealToken, TokenVerifier) {
        let data = try TestPaths.sharedFile("real-tokens/\(name)")
        let real = try JSONDecoder().decode(RealToken.self, from: data)
        let object = try JSONParser.parseObject(Array(data))
        let jwks = JSONWriter.string(try #require(object["jwks"]))
        var policy: ProviderPolicy
        switch real.provider {
        case "apple": policy = .apple(audiences: [real.aud])
        case "facebook_limited": policy = .facebookLimited(audiences: [real.aud])
        default: throw TestError("unexpected provider \(real.provider)")
        }
        policy.nonceMode = .raw
        policy.nonceRequired = false
        return (real, try Verifiers.make(policy, jwks: jwks))
    }

    @Test("real tokens verify under their provider's policy", arguments: try files())
    func verifies(name: String) throws {
        let (real, verifier) = try Self.load(name)
        let result = verifier.verify(token: real.token, nonce: real.nonce, at: real.iat + 60)
        let verdict = try #require(result.verdict, "\(name): \(result)")
        #expect(verdict.issuer == real.iss)
        #expect(verdict.audience == real.aud)
        #expect(verdict.expiresAt == real.exp)
        if real.provider == "apple" { #expect(verdict.emailVerified, "Apple's email_verified (string or bool) normalises to true") }
        // The clock matters: at exp + leeway the same token is expired.
        #expect(verifier.verify(token: real.token, nonce: real.nonce, at: real.exp + 60).code == .tokenExpired)
        // A wrong nonce is refused.
        if real.nonce != nil { #expect(verifier.verify(token: real.token, nonce: "not-the-nonce", at: real.iat + 60).code == .nonceMismatch) }
    }

    @Test("real tokens fail once any byte is altered", arguments: try files())
    func anyAlteredByteFails(name: String) async throws {
        let (real, verifier) = try Self.load(name)
        let original = Array(real.token.utf8)
        for index in original.indices where original[index] != UInt8(ascii: ".") {
            if index % 64 == 0 { await Task.yield() }  // CPU-bound: let other tests' tasks run
            var mutated = original
            // Swap for another base64url character so the token stays well-formed where possible.
            mutated[index] = original[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            let result = verifier.verify(token: String(decoding: mutated, as: UTF8.self), nonce: real.nonce, at: real.iat + 60)
            #expect(result.verdict == nil, "\(name): altering byte \(index) must not verify")
        }
    }

    @Test("real tokens fail under the other providers' policies", arguments: try files())
    func otherPolicies(name: String) throws {
        let (real, _) = try Self.load(name)
        let data = try TestPaths.sharedFile("real-tokens/\(name)")
        let jwks = JSONWriter.string(try #require(try JSONParser.parseObject(Array(data))["jwks"]))
        let others: [ProviderPolicy] =
            real.provider == "apple"
            ? [.facebookLimited(audiences: [real.aud]), .microsoft(audiences: [real.aud], tenants: .any)]
            : [.apple(audiences: [real.aud]), .microsoft(audiences: [real.aud], tenants: .any)]
        for var policy in others {
            policy.nonceRequired = false
            let result = try Verifiers.make(policy, jwks: jwks).verify(token: real.token, nonce: nil, at: real.iat + 60)
            #expect(result.code == .invalidIssuer, "\(name) under \(policy.kind): \(result)")
        }
    }
}

struct TestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
