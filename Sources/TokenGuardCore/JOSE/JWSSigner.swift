import TokenGuardCrypto

/// Produces compact JWS tokens: for the developer IdP, the tests and the benchmark. Verification never uses it.
public enum JWSSigner {
    /// Signs `claims` under `header` (which should carry `alg` and usually `kid`) and returns the compact JWS.
    public static func sign(header: JSONObject, claims: JSONObject, key: SigningKey, algorithm: SignatureAlgorithm) throws -> String {
        let signingInput = Base64URL.encode(JSONWriter.bytes(.object(header))) + "." + Base64URL.encode(JSONWriter.bytes(.object(claims)))
        let signature = try key.sign(Array(signingInput.utf8), algorithm: algorithm)
        return signingInput + "." + Base64URL.encode(signature)
    }
}

extension SigningKey {
    /// The public half as a JWK with `use: sig`, the given `kid` and, when given, `alg`.
    public func publicJWK(keyID: String, algorithm: SignatureAlgorithm?) throws -> JSONObject {
        var members: [(String, JSONValue)] = []
        switch kind {
        case .rsa:
            let (n, e) = try rsaComponents()
            members = [("kty", .string("RSA")), ("n", .string(Base64URL.encode(n))), ("e", .string(Base64URL.encode(e)))]
        case .ec(let curve):
            let (x, y) = try ecCoordinates()
            members = [
                ("kty", .string("EC")), ("crv", .string(curve.rawValue)), ("x", .string(Base64URL.encode(x))),
                ("y", .string(Base64URL.encode(y))),
            ]
        case .ed25519:
            members = [("kty", .string("OKP")), ("crv", .string("Ed25519")), ("x", .string(Base64URL.encode(try ed25519PublicBytes())))]
        }
        members += [("use", .string("sig")), ("kid", .string(keyID))]
        if let algorithm { members.append(("alg", .string(algorithm.rawValue))) }
        return JSONObject(members)
    }

    /// The JWS algorithm a key of this kind signs with by default.
    public var defaultAlgorithm: SignatureAlgorithm {
        switch kind {
        case .rsa: .rs256
        case .ec(.p256): .es256
        case .ec(.p384): .es384
        case .ec(.p521): .es512
        case .ed25519: .edDSA
        }
    }
}
