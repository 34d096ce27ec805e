import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// Every Wycheproof signature vector for the JWS algorithms, through tokenguard's own key parsing (JWK → OpenSSL)
/// and signature layer. Valid vectors must verify, invalid ones must not.
///
/// "Acceptable" vectors: the only ones in these files are RSASSA-PKCS1-v1_5 `MissingNull` signatures (a DigestInfo
/// whose AlgorithmIdentifier omits the NULL parameter, a legacy encoding RFC 8017 §9.2 note 2 tolerates). tokenguard
/// rejects them: OpenSSL 3 re-encodes the DigestInfo with the NULL and compares, and no provider signs that way.
/// The test pins that behaviour so that any change is seen.
struct WycheproofSignatureTests {
    struct File: Decodable {
        let testGroups: [Group]
    }

    struct Group: Decodable {
        let publicKeyJwk: [String: String]?
        let keyJwk: [String: String]?
        let publicKey: RawPublicKey?
        let tests: [Vector]
    }

    /// The raw public key Wycheproof gives for every EC group, including those it cannot express as a JWK.
    struct RawPublicKey: Decodable {
        let curve: String?
        let wx: String?
        let wy: String?
    }

    /// A JWK for an EC group that has none, from its raw coordinates (hex, possibly with a sign byte).
    static func ecJWK(from raw: RawPublicKey) -> [String: String]? {
        guard let wx = raw.wx, let wy = raw.wy else { return nil }
        let (crv, size) = raw.curve == "secp384r1" ? ("P-384", 48) : ("P-256", 32)
        func coordinate(_ hexText: String) -> String {
            var bytes = Array(hex(hexText).drop(while: { $0 == 0 }))
            if bytes.count < size { bytes = [UInt8](repeating: 0, count: size - bytes.count) + bytes }
            return Base64URL.encode(bytes)
        }
        return ["kty": "EC", "crv": crv, "x": coordinate(wx), "y": coordinate(wy)]
    }

    struct Vector: Decodable {
        let tcId: Int
        let comment: String
        let msg: String
        let sig: String
        let result: String
        let flags: [String]
    }

    static let files: [(String, SignatureAlgorithm)] = [
        ("rsa_signature_2048_sha256_test.json", .rs256),
        ("rsa_signature_3072_sha256_test.json", .rs256),
        ("rsa_signature_4096_sha256_test.json", .rs256),
        ("rsa_signature_2048_sha384_test.json", .rs384),
        ("rsa_signature_2048_sha512_test.json", .rs512),
        ("rsa_pss_2048_sha256_mgf1_32_test.json", .ps256),
        ("ecdsa_secp256r1_sha256_p1363_test.json", .es256),
        ("ecdsa_secp384r1_sha384_p1363_test.json", .es384),
        ("ed25519_test.json", .edDSA),
    ]

    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            bytes.append(UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) ?? 0)
        }
        return bytes
    }

    @Test("Wycheproof signature vectors", arguments: files)
    func vectors(file: String, algorithm: SignatureAlgorithm) async throws {
        let data = try TestPaths.sharedFile("testvectors/wycheproof/\(file)")
        let parsed = try JSONDecoder().decode(File.self, from: data)
        var checked = 0
        for group in parsed.testGroups {
            await Task.yield()  // CPU-bound: let other tests' tasks run
            let jwkStrings = try #require(group.publicKeyJwk ?? group.keyJwk ?? group.publicKey.flatMap(Self.ecJWK))
            let jwk = JSONObject(jwkStrings.sorted { $0.key < $1.key }.map { ($0.key, JSONValue.string($0.value)) })
            let key: VerificationKey
            switch JWKParser.parse(jwk) {
            case .success(let parsedKey):
                key = parsedKey
            case .failure(let skipped):
                // A key tokenguard refuses may only carry vectors that must fail anyway.
                for vector in group.tests { #expect(vector.result != "valid", "tc \(vector.tcId): key refused: \(skipped)") }
                continue
            }
            for vector in group.tests {
                let result = SignatureVerifier.verify(
                    signature: Self.hex(vector.sig), message: Self.hex(vector.msg), key: key.publicKey, algorithm: algorithm)
                let accepted = (try? result.get()) != nil
                switch vector.result {
                case "valid": #expect(accepted, "\(file) tc \(vector.tcId) (\(vector.comment)) should verify")
                case "invalid": #expect(!accepted, "\(file) tc \(vector.tcId) (\(vector.comment)) should be rejected")
                default:
                    #expect(vector.flags == ["MissingNull"], "unexpected acceptable vector \(vector.tcId) \(vector.flags)")
                    #expect(!accepted, "\(file) tc \(vector.tcId): MissingNull is rejected by tokenguard")
                }
                checked += 1
            }
        }
        #expect(checked > 100)
    }
}
