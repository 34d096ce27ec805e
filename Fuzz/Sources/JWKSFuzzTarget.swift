import TokenGuardCrypto
import TokenGuardService

@testable import TokenGuardCore

/// The JWK/JWKS parser, and OpenSSL verification with whatever keys it accepts.
///
/// Properties: nothing traps; parsing is deterministic (same keys, same thumbprints, same order); at most
/// `KeySet.maximumKeys` keys; every key's own JWK parses back to the same thumbprint; a key is only offered
/// for algorithms of its type; verifying the sample signature with any accepted key does not trap.
enum JWKSFuzzTarget {
    static let sample: (message: [UInt8], signature: [UInt8]) = {
        let token = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLWJ5dGVzLXRoYXQtZG8tbm90LXZlcmlmeQ"
        let parts = token.split(separator: ".")
        return (Array("\(parts[0]).\(parts[1])".utf8), Base64URL.decode(String(parts[2])) ?? [])
    }()

    static let target = FuzzTarget(name: "jwks", summary: "JWK/JWKS parser and verification with the keys it accepts") { bytes in
        guard let first = try? KeySet.parse(jwks: bytes) else { return }
        guard let second = try? KeySet.parse(jwks: bytes) else { fatalError("a JWKS parsed once and failed the second time") }
        require(first.keys.map(\.thumbprint) == second.keys.map(\.thumbprint), "parsing the same JWKS twice gave different keys")
        require(first.keys.count <= KeySet.maximumKeys, "more than \(KeySet.maximumKeys) keys")
        for key in first.keys {
            guard case .success(let again) = JWKParser.parse(key.jwk) else { fatalError("a key's own JWK does not parse again") }
            require(again.thumbprint == key.thumbprint, "a key's own JWK parses to another thumbprint")
            for alg in SignatureAlgorithm.allCases {
                if key.permits(alg) {
                    require(alg.keyType == key.publicKey.keyType, "key of type \(key.publicKey.keyType) offered for \(alg)")
                    let result = SignatureVerifier.verify(
                        signature: sample.signature, message: sample.message[...], key: key.publicKey, algorithm: alg)
                    if case .success = result { fatalError("a garbage signature verified with \(alg)") }
                }
            }
            if let kid = key.keyID {
                require(first.candidates(keyID: kid, algorithm: .rs256).contains { $0.thumbprint == key.thumbprint }, "a key is not found by its kid")
            }
        }
    }
}
