import Foundation
import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// Wycheproof's whole-JWS vectors through tokenguard's JWS verifier (structure, algorithm, key, signature).
///
/// Deliberate differences from Wycheproof's "valid" verdicts, each asserted below:
/// - HMAC (`HS256` and friends, groups with an `oct` key): tokenguard holds only public keys and never accepts a MAC,
///   so these are `unsupported_algorithm`; two of them (tc 372, 373) carry a character inserted into a segment, which
///   Wycheproof's lenient decoder skips and tokenguard's strict base64url refuses first (`malformed_token`).
/// - RFC 7520 Figure 20 (tc 346, 350): a PS384 token whose JWK says `"alg": "PS256"`. tokenguard honours a key's own
///   `alg`, so the token is `unsupported_algorithm`.
/// - RFC 7520 P-521 groups whose JWK says `"alg": "ES521"` (not a registered algorithm): tokenguard does not use a key
///   whose own `alg` it does not recognise, rather than use it without that constraint, so these are `unknown_key`.
struct WycheproofJWSTests {
    struct File: Decodable { let testGroups: [Group] }

    struct Group: Decodable {
        let comment: String?
        let `public`: [String: JSONAny]?
        let tests: [Vector]
    }

    struct Vector: Decodable {
        let tcId: Int
        let comment: String
        let jws: JSONAny
        let result: String
    }

    /// Any JSON, re-serialised for tokenguard's own parser.
    struct JSONAny: Decodable {
        let value: Any
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let string = try? container.decode(String.self) {
                value = string
            } else if let array = try? container.decode([JSONAny].self) {
                value = array.map(\.value)
            } else if let object = try? container.decode([String: JSONAny].self) {
                value = object.mapValues(\.value)
            } else if let number = try? container.decode(Double.self) {
                value = number
            } else {
                value = NSNull()
            }
        }
    }

    @Test("Wycheproof JSON Web Signature vectors")
    func vectors() throws {
        let data = try TestPaths.sharedFile("testvectors/wycheproof/json_web_signature_test.json")
        let file = try JSONDecoder().decode(File.self, from: data)
        var accepted = 0
        var rejected = 0
        for group in file.testGroups {
            let keySet: KeySet
            if let publicKey = group.public {
                let jwks = try JSONSerialization.data(withJSONObject: ["keys": [publicKey.mapValues(\.value)]])
                keySet = try KeySet.parse(jwks: Array(jwks))
            } else {
                keySet = .empty  // symmetric-key groups: tokenguard has no key to offer, by design
            }
            let isHMACGroup = group.public == nil
            let hasUnregisteredKeyAlg = (group.public?["alg"]?.value as? String) == "ES521"
            let verifier = TokenVerifier(
                policy: .oidc(name: "wycheproof", issuer: "https://example.com", audiences: ["x"]), keySource: InMemoryKeySource(keySet))
            for vector in group.tests {
                guard let token = vector.jws.value as? String else {
                    // JSON serialisation (not compact) is never accepted: the contract takes compact JWS only.
                    #expect(vector.result == "invalid", "tc \(vector.tcId)")
                    rejected += 1
                    continue
                }
                let result = verifier.verifySignature(token: token)
                switch (vector.result, result) {
                case ("valid", .success):
                    accepted += 1
                case ("valid", .failure(let error)) where isHMACGroup:
                    let expected: ErrorCode = [372, 373].contains(vector.tcId) ? .malformedToken : .unsupportedAlgorithm
                    #expect(error.code == expected, "tc \(vector.tcId): HMAC must be \(expected), got \(error)")
                    rejected += 1
                case ("valid", .failure(let error)) where [346, 350].contains(vector.tcId):
                    #expect(error.code == .unsupportedAlgorithm, "tc \(vector.tcId): key alg PS256 must refuse PS384, got \(error)")
                    rejected += 1
                case ("valid", .failure(let error)) where hasUnregisteredKeyAlg:
                    #expect(error.code == .unknownKey, "tc \(vector.tcId): key with alg ES521 is not used, got \(error)")
                    rejected += 1
                case ("valid", .failure(let error)):
                    Issue.record("tc \(vector.tcId) (\(vector.comment)) should verify: \(error)")
                case ("invalid", .success):
                    Issue.record("tc \(vector.tcId) (\(vector.comment)) must be rejected")
                case ("invalid", .failure):
                    rejected += 1
                default:
                    Issue.record("tc \(vector.tcId): unexpected result kind \(vector.result)")
                }
            }
        }
        #expect(accepted >= 30)
        #expect(rejected >= 300)
    }
}
