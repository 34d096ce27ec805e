import COpenSSL

/// A private key that signs JWS tokens: used by the developer IdP, the tests and the benchmark, never by verification.
///
/// Owns one `EVP_PKEY`; `@unchecked Sendable` for the same reason as ``PublicKey``: immutable pointer,
/// freed in `deinit`, and every signature uses its own `EVP_MD_CTX`.
@safe public final class SigningKey: @unchecked Sendable {
    public enum Kind: Sendable, Hashable {
        case rsa(bits: Int)
        case ec(EllipticCurve)
        case ed25519
    }

    let pkey: OpaquePointer
    public let kind: Kind

    deinit { unsafe EVP_PKEY_free(pkey) }

    /// Generates a fresh key.
    public init(generating kind: Kind) throws {
        let name: String
        switch kind {
        case .rsa: name = "RSA"
        case .ec: name = "EC"
        case .ed25519: name = "ED25519"
        }
        guard let ctx = unsafe EVP_PKEY_CTX_new_from_name(nil, name, nil) else { throw OpenSSLError("EVP_PKEY_CTX_new_from_name") }
        defer { unsafe EVP_PKEY_CTX_free(ctx) }
        guard unsafe EVP_PKEY_keygen_init(ctx) == 1 else { throw OpenSSLError("EVP_PKEY_keygen_init") }
        switch kind {
        case .rsa(let bits):
            guard unsafe EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)) == 1 else { throw OpenSSLError("set_rsa_keygen_bits") }
        case .ec(let curve):
            guard unsafe EVP_PKEY_CTX_set_group_name(ctx, curve.openSSLGroupName) == 1 else { throw OpenSSLError("set_group_name") }
        case .ed25519:
            break
        }
        var pkey: OpaquePointer? = nil
        guard unsafe EVP_PKEY_generate(ctx, &pkey) == 1, let pkey = unsafe pkey else { throw OpenSSLError("EVP_PKEY_generate") }
        unsafe self.pkey = unsafe pkey
        self.kind = kind
    }

    /// Loads a PEM private key (PKCS#8 or traditional).
    public init(pem: String) throws {
        let bytes = Array(pem.utf8)
        guard bytes.count <= Int(Int32.max) else { throw OpenSSLError("PEM too large") }
        // BIO_new_mem_buf keeps the pointer it is given: the BIO is created, read and freed while the buffer is
        // pinned by withUnsafeBufferPointer, never after (an array passed as a pointer argument dies with the call).
        let loaded: OpaquePointer? = unsafe bytes.withUnsafeBufferPointer { buffer in
            guard let bio = unsafe BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { unsafe BIO_free(bio) }
            return unsafe PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let pkey = unsafe loaded else { throw OpenSSLError("PEM_read_bio_PrivateKey") }
        unsafe self.pkey = unsafe pkey
        switch unsafe EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA: kind = unsafe .rsa(bits: Int(EVP_PKEY_get_bits(pkey)))
        case EVP_PKEY_ED25519: kind = .ed25519
        case EVP_PKEY_EC:
            switch unsafe EVP_PKEY_get_bits(pkey) {
            case 256: kind = .ec(.p256)
            case 384: kind = .ec(.p384)
            case 521: kind = .ec(.p521)
            default:
                unsafe EVP_PKEY_free(pkey)
                throw OpenSSLError("unsupported EC curve")
            }
        default:
            unsafe EVP_PKEY_free(pkey)
            throw OpenSSLError("unsupported key type")
        }
    }

    /// Signs `message` as `algorithm` would, returning the JWS signature bytes (raw `r || s` for ECDSA).
    public func sign(_ message: [UInt8], algorithm: SignatureAlgorithm) throws -> [UInt8] {
        guard let ctx = unsafe EVP_MD_CTX_new() else { throw OpenSSLError("EVP_MD_CTX_new") }
        defer { unsafe EVP_MD_CTX_free(ctx) }
        var pctx: OpaquePointer? = nil
        guard unsafe EVP_DigestSignInit(ctx, &pctx, algorithm.digest?.md, nil, pkey) == 1 else {
            throw OpenSSLError("EVP_DigestSignInit")
        }
        if algorithm.usesPSS {
            guard unsafe EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1,
                unsafe EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, tg_rsa_pss_saltlen_digest()) == 1
            else { throw OpenSSLError("PSS parameters") }
        }
        var length = 0
        let input = message.isEmpty ? [0] : message
        let inputCount = message.count
        guard unsafe EVP_DigestSign(ctx, nil, &length, input, inputCount) == 1 else { throw OpenSSLError("EVP_DigestSign size") }
        var signature = [UInt8](repeating: 0, count: length)
        guard unsafe EVP_DigestSign(ctx, &signature, &length, input, inputCount) == 1 else { throw OpenSSLError("EVP_DigestSign") }
        signature.removeLast(signature.count - length)
        if case .ec(let curve) = kind { return try Self.rawFromDER(signature, curve: curve) }
        return signature
    }

    /// The public half as a ``PublicKey``.
    public func publicKey() throws -> PublicKey {
        switch kind {
        case .rsa:
            let (n, e) = try rsaComponents()
            return try PublicKey(rsaModulus: n, exponent: e)
        case .ec(let curve):
            let (x, y) = try ecCoordinates()
            return try PublicKey(curve: curve, x: x, y: y)
        case .ed25519:
            return try PublicKey(ed25519: try ed25519PublicBytes())
        }
    }

    /// RSA modulus and exponent, big-endian.
    public func rsaComponents() throws -> (n: [UInt8], e: [UInt8]) {
        (try bignumParam(OSSL_PKEY_PARAM_RSA_N), try bignumParam(OSSL_PKEY_PARAM_RSA_E))
    }

    /// EC affine coordinates, each padded to the curve's coordinate length.
    public func ecCoordinates() throws -> (x: [UInt8], y: [UInt8]) {
        guard case .ec(let curve) = kind else { throw OpenSSLError("not an EC key") }
        let size = curve.coordinateByteCount
        let x = try bignumParam(OSSL_PKEY_PARAM_EC_PUB_X)
        let y = try bignumParam(OSSL_PKEY_PARAM_EC_PUB_Y)
        return ([UInt8](repeating: 0, count: size - x.count) + x, [UInt8](repeating: 0, count: size - y.count) + y)
    }

    public func ed25519PublicBytes() throws -> [UInt8] {
        var length = 32
        var out = [UInt8](repeating: 0, count: 32)
        guard unsafe EVP_PKEY_get_raw_public_key(pkey, &out, &length) == 1, length == 32 else {
            throw OpenSSLError("EVP_PKEY_get_raw_public_key")
        }
        return out
    }

    /// The public key as a PEM `SubjectPublicKeyInfo` (what libjwt and most libraries take).
    public func publicKeyPEM() throws -> String {
        guard let bio = unsafe BIO_new(BIO_s_mem()) else { throw OpenSSLError("BIO_new") }
        defer { unsafe BIO_free(bio) }
        guard unsafe PEM_write_bio_PUBKEY(bio, pkey) == 1 else { throw OpenSSLError("PEM_write_bio_PUBKEY") }
        return try unsafe Self.string(from: bio)
    }

    /// The private key as PKCS#8 PEM (for the developer IdP's key file).
    public func privateKeyPEM() throws -> String {
        guard let bio = unsafe BIO_new(BIO_s_mem()) else { throw OpenSSLError("BIO_new") }
        defer { unsafe BIO_free(bio) }
        guard unsafe PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 else {
            throw OpenSSLError("PEM_write_bio_PrivateKey")
        }
        return try unsafe Self.string(from: bio)
    }

    private static func string(from bio: OpaquePointer) throws -> String {
        var data: UnsafeMutablePointer<CChar>? = nil
        let length = unsafe tg_bio_get_mem_data(bio, &data)
        guard length > 0, let data = unsafe data else { throw OpenSSLError("BIO_get_mem_data") }
        return unsafe data.withMemoryRebound(to: UInt8.self, capacity: length) {
            unsafe String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }

    private func bignumParam(_ name: String) throws -> [UInt8] {
        var bn: OpaquePointer? = nil
        guard unsafe EVP_PKEY_get_bn_param(pkey, name, &bn) == 1, let bn = unsafe bn else { throw OpenSSLError("EVP_PKEY_get_bn_param(\(name))") }
        defer { unsafe BN_free(bn) }
        let count = unsafe (Int(BN_num_bits(bn)) + 7) / 8
        var out = [UInt8](repeating: 0, count: count)
        _ = unsafe BN_bn2bin(bn, &out)
        return out
    }

    /// DER `ECDSA-Sig-Value` → JWS raw `r || s`, each left-padded to the coordinate length.
    static func rawFromDER(_ der: [UInt8], curve: EllipticCurve) throws -> [UInt8] {
        var cursor: UnsafePointer<UInt8>? = nil
        let sig: OpaquePointer? = unsafe der.withUnsafeBufferPointer { buffer in
            unsafe cursor = buffer.baseAddress
            return unsafe d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let sig = unsafe sig else { throw OpenSSLError("d2i_ECDSA_SIG") }
        defer { unsafe ECDSA_SIG_free(sig) }
        let size = curve.coordinateByteCount
        var out = [UInt8](repeating: 0, count: 2 * size)
        unsafe out.withUnsafeMutableBufferPointer { buffer in
            _ = unsafe BN_bn2binpad(ECDSA_SIG_get0_r(sig), buffer.baseAddress, Int32(size))
            _ = unsafe BN_bn2binpad(ECDSA_SIG_get0_s(sig), buffer.baseAddress! + size, Int32(size))
        }
        return out
    }
}
