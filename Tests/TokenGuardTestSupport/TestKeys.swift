import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardSync

/// A signing key with its kid and algorithm, as a test IdP would publish it.
package struct TestKey: Sendable {
    package let signingKey: SigningKey
    package let keyID: String
    package let algorithm: SignatureAlgorithm

    package init(_ kind: SigningKey.Kind, keyID: String, algorithm: SignatureAlgorithm? = nil) throws {
        signingKey = try SigningKey(generating: kind)
        self.keyID = keyID
        self.algorithm = algorithm ?? signingKey.defaultAlgorithm
    }

    package init(signingKey: SigningKey, keyID: String, algorithm: SignatureAlgorithm) {
        self.signingKey = signingKey
        self.keyID = keyID
        self.algorithm = algorithm
    }

    /// The package JWK; `includeAlgorithm` adds the key's own `alg`, as Apple and Facebook do.
    package func jwk(includeAlgorithm: Bool = true) throws -> JSONObject {
        try signingKey.publicJWK(keyID: keyID, algorithm: includeAlgorithm ? algorithm : nil)
    }

    /// A token signed by this key with `header` members added to `alg`/`kid`.
    package func sign(_ claims: JSONObject, extraHeader: [(String, JSONValue)] = [], keyID overrideKeyID: String? = nil) throws -> String {
        var header = JSONObject([("alg", .string(algorithm.rawValue)), ("kid", .string(overrideKeyID ?? keyID))])
        for (name, value) in extraHeader { header.set(name, value) }
        return try JWSSigner.sign(header: header, claims: claims, key: signingKey, algorithm: algorithm)
    }
}

/// Keys shared across tests in one process: RSA generation is slow, so each kind is made once.
package enum SharedTestKeys {
    private static let cache = Locked<[String: TestKey]>([:])

    package static func key(_ name: String, _ kind: SigningKey.Kind, algorithm: SignatureAlgorithm? = nil) throws -> TestKey {
        if let key = cache.withLock({ $0[name] }) { return key }
        let key = try TestKey(kind, keyID: name, algorithm: algorithm)
        cache.withLock { $0[name] = key }
        return key
    }

    package static func rsa() throws -> TestKey { try key("rsa-test-1", .rsa(bits: 2048)) }
    package static func rsaPSS() throws -> TestKey { try key("rsa-pss-1", .rsa(bits: 2048), algorithm: .ps256) }
    package static func p256() throws -> TestKey { try key("ec-p256-1", .ec(.p256)) }
    package static func p384() throws -> TestKey { try key("ec-p384-1", .ec(.p384)) }
    package static func p521() throws -> TestKey { try key("ec-p521-1", .ec(.p521)) }
    package static func ed25519() throws -> TestKey { try key("ed25519-1", .ed25519) }

    /// A JWKS document holding the given keys.
    package static func jwks(_ keys: [TestKey], includeAlgorithm: Bool = true) throws -> String {
        JSONWriter.string(.object(JSONObject([("keys", .array(try keys.map { .object(try $0.jwk(includeAlgorithm: includeAlgorithm)) }))])))
    }

    package static func keySet(_ keys: [TestKey]) throws -> KeySet {
        try KeySet.parse(jwks: Array(try jwks(keys).utf8))
    }
}

extension TestKey {
    /// Signs raw header and payload JSON text exactly as given (for duplicate members, odd encodings and the like).
    package func signRaw(header: String, payload: String, algorithm overrideAlgorithm: SignatureAlgorithm? = nil) throws -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        let signature = try signingKey.sign(Array(input.utf8), algorithm: overrideAlgorithm ?? algorithm)
        return input + "." + Base64URL.encode(signature)
    }
}

/// Splits a compact JWS into its three segments.
package func segments(_ token: String) -> [String] {
    token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
}
