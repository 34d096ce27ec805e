import TokenGuardCrypto

/// Parses one JWK into a ``VerificationKey``, or says why the key is unusable.
public enum JWKParser {
    public struct Skipped: Error, Sendable, Equatable, CustomStringConvertible {
        public let keyID: String?
        public let reason: String
        public var description: String { "key \(keyID.map { "\"\($0.excerpt(bytes: 64))\"" } ?? "(no kid)"): \(reason)" }
    }

    public static func parse(_ jwk: JSONObject) -> Result<VerificationKey, Skipped> {
        var kid: String? = nil
        if let value = jwk["kid"] {
            guard let string = value.stringValue else { return .failure(Skipped(keyID: nil, reason: "kid is not a string")) }
            kid = string
        }
        func skip(_ reason: String) -> Result<VerificationKey, Skipped> { .failure(Skipped(keyID: kid, reason: reason)) }

        guard let kty = jwk["kty"]?.stringValue else { return skip("kty missing or not a string") }
        if let use = jwk["use"] {
            guard use.stringValue == "sig" else { return skip("use is not \"sig\"") }
        }
        if let ops = jwk["key_ops"] {
            guard let list = ops.arrayValue, list.contains(.string("verify")) else { return skip("key_ops does not allow verify") }
        }
        var algorithm: SignatureAlgorithm? = nil
        if let algValue = jwk["alg"] {
            guard let name = algValue.stringValue else { return skip("alg is not a string") }
            // A key whose alg we do not recognise is not used at all, rather than used without its constraint.
            guard let alg = SignatureAlgorithm(rawValue: name) else { return skip("alg \"\(name.excerpt(bytes: 16))\" is not an accepted algorithm") }
            algorithm = alg
        }
        var issuer: String? = nil
        if let issuerValue = jwk["issuer"] {
            guard let string = issuerValue.stringValue else { return skip("issuer is not a string") }
            issuer = string
        }
        /// A base64url member, decoded, with its original text for the thumbprint.
        func member(_ name: String) -> (text: String, bytes: [UInt8])? {
            guard let text = jwk[name]?.stringValue, let bytes = Base64URL.decode(text) else { return nil }
            return (text, bytes)
        }
        let publicKey: PublicKey
        let thumbprintInput: JSONObject
        do {
            // By bytes: as Strings, "O\u{212A}P" (KELVIN SIGN) would be "OKP".
            if kty.sameBytes(as: "RSA") {
                guard let n = member("n"), let e = member("e") else { return skip("RSA n or e missing or not base64url") }
                publicKey = try PublicKey(rsaModulus: n.bytes, exponent: e.bytes)
                thumbprintInput = JSONObject([("e", .string(e.text)), ("kty", .string("RSA")), ("n", .string(n.text))])
            } else if kty.sameBytes(as: "EC") {
                guard let crvName = jwk["crv"]?.stringValue, let curve = EllipticCurve(rawValue: crvName) else {
                    return skip("EC crv missing or not P-256, P-384 or P-521")
                }
                guard let x = member("x"), let y = member("y") else { return skip("EC x or y missing or not base64url") }
                publicKey = try PublicKey(curve: curve, x: x.bytes, y: y.bytes)
                thumbprintInput = JSONObject([
                    ("crv", .string(crvName)), ("kty", .string("EC")), ("x", .string(x.text)), ("y", .string(y.text)),
                ])
            } else if kty.sameBytes(as: "OKP") {
                guard jwk["crv"]?.stringValue?.sameBytes(as: "Ed25519") == true else { return skip("OKP crv is not Ed25519") }
                guard let x = member("x") else { return skip("OKP x missing or not base64url") }
                publicKey = try PublicKey(ed25519: x.bytes)
                thumbprintInput = JSONObject([("crv", .string("Ed25519")), ("kty", .string("OKP")), ("x", .string(x.text))])
            } else {
                return skip("kty \"\(kty.excerpt(bytes: 16))\" is not RSA, EC or OKP")
            }
        } catch let error as PublicKey.KeyError {
            return skip("\(error)")
        } catch {
            return skip("\(error)")
        }
        if let algorithm, algorithm.keyType != publicKey.keyType {
            return skip("alg \(algorithm.rawValue) does not fit a \(publicKey.keyType) key")
        }
        let thumbprint = Base64URL.encode(SHA256.hash(JSONWriter.bytes(.object(thumbprintInput))))
        return .success(
            VerificationKey(keyID: kid, publicKey: publicKey, algorithm: algorithm, issuer: issuer, thumbprint: thumbprint, jwk: jwk))
    }
}
