import TokenGuardSync
import COpenSSL
import Synchronization

/// A parsed public key, owning one OpenSSL `EVP_PKEY` for its whole life.
///
/// Built once from a JWK and reused for every verification. `@unchecked Sendable` is sound: the pointer
/// is immutable after init, freed only in `deinit`, and verify-only use of an `EVP_PKEY` is thread-safe
/// in OpenSSL 3 (each verification makes its own `EVP_MD_CTX`).
public final class PublicKey: @unchecked Sendable {
    public enum KeyType: Sendable, Hashable, CustomStringConvertible {
        case rsa
        case ec(EllipticCurve)
        case ed25519

        public var description: String {
            switch self {
            case .rsa: "RSA"
            case .ec(let curve): "EC \(curve.rawValue)"
            case .ed25519: "OKP Ed25519"
            }
        }
    }

    public enum KeyError: Error, Sendable, Equatable {
        case rsaModulusTooSmall(bits: Int)
        case rsaModulusTooLarge(bits: Int)
        case rsaExponentInvalid
        case ecCoordinateLength(expected: Int, actual: Int)
        case ecPointNotOnCurve
        case ed25519KeyLength(Int)
        case openSSL(String)
    }

    /// RSA keys below this size are refused (NIST SP 800-131A; every provider uses 2048 or more).
    public static let minimumRSABits = 2048
    /// RSA keys above this size are refused: verification cost grows with the modulus, and no provider uses more.
    public static let maximumRSABits = 8192

    let pkey: OpaquePointer
    public let keyType: KeyType
    public let bits: Int
    /// Initialised verification contexts, one per algorithm used with this key, made on first use.
    private let templates = Locked<[SignatureAlgorithm: VerificationTemplate]>([:])
    /// Idle `EVP_PKEY_CTX`s initialised for verifying a pre-computed digest, per algorithm. A verification takes
    /// one (or makes one), uses it alone, and puts it back; at most `maximumPooledContexts` idle ones are kept.
    private let verifyContexts = Locked<[SignatureAlgorithm: [PooledContext]]>([:])

    /// An idle pooled context. `@unchecked Sendable`: it moves between threads only through the pool's lock,
    /// and a verification that takes it out is its only user until it is put back.
    struct PooledContext: @unchecked Sendable {
        let pointer: OpaquePointer
    }
    static let maximumPooledContexts = 64

    init(takingOwnershipOf pkey: OpaquePointer, keyType: KeyType) {
        self.pkey = pkey
        self.keyType = keyType
        self.bits = Int(EVP_PKEY_get_bits(pkey))
    }

    deinit {
        verifyContexts.withLock { pools in
            for pool in pools.values { for ctx in pool { EVP_PKEY_CTX_free(ctx.pointer) } }
        }
        EVP_PKEY_free(pkey)
    }

    /// Runs `body` with an `EVP_PKEY_CTX` set up for `EVP_PKEY_verify` of a digest under `algorithm`, used by this
    /// call alone; nil when OpenSSL cannot make one.
    func withVerifyContext(for algorithm: SignatureAlgorithm, _ body: (OpaquePointer) -> Bool) -> Bool? {
        let pooled: OpaquePointer? = verifyContexts.withLock { pools in pools[algorithm]?.popLast()?.pointer }
        guard let ctx = pooled ?? makeVerifyContext(for: algorithm) else { return nil }
        let result = body(ctx)
        let returned = PooledContext(pointer: ctx)
        let kept = verifyContexts.withLock { pools -> Bool in
            guard pools[algorithm, default: []].count < Self.maximumPooledContexts else { return false }
            pools[algorithm, default: []].append(returned)
            return true
        }
        if !kept { EVP_PKEY_CTX_free(ctx) }
        return result
    }

    private func makeVerifyContext(for algorithm: SignatureAlgorithm) -> OpaquePointer? {
        guard let digest = algorithm.digest, let ctx = EVP_PKEY_CTX_new(pkey, nil) else { return nil }
        var ok = EVP_PKEY_verify_init(ctx) == 1 && EVP_PKEY_CTX_set_signature_md(ctx, digest.md) == 1
        if ok && algorithm.usesPSS {
            ok =
                EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PSS_PADDING) == 1
                && EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, tg_rsa_pss_saltlen_digest()) == 1
                && EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, digest.md) == 1
        } else if ok && keyType == .rsa {
            ok = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1
        }
        guard ok else {
            _ = OpenSSLError.drainErrorQueue()
            EVP_PKEY_CTX_free(ctx)
            return nil
        }
        return ctx
    }

    /// The initialised `EVP_MD_CTX` for verifying `algorithm` with this key, created once and then only copied.
    func verificationTemplate(for algorithm: SignatureAlgorithm) -> VerificationTemplate? {
        if let template = templates.withLock({ $0[algorithm] }) { return template }
        guard let template = VerificationTemplate(key: self, algorithm: algorithm) else { return nil }
        return templates.withLock { cache in
            if let existing = cache[algorithm] { return existing }
            cache[algorithm] = template
            return template
        }
    }

    /// An RSA public key from its big-endian modulus and exponent.
    public convenience init(rsaModulus modulus: [UInt8], exponent: [UInt8]) throws {
        let significant = modulus.drop(while: { $0 == 0 })
        let modulusBits = significant.isEmpty ? 0 : (significant.count - 1) * 8 + (8 - significant[significant.startIndex].leadingZeroBitCount)
        guard modulusBits >= PublicKey.minimumRSABits else { throw KeyError.rsaModulusTooSmall(bits: modulusBits) }
        guard modulusBits <= PublicKey.maximumRSABits else { throw KeyError.rsaModulusTooLarge(bits: modulusBits) }
        let exp = exponent.drop(while: { $0 == 0 })
        // e must be odd, greater than 1 and small enough to be a sane public exponent.
        guard let last = exp.last, last & 1 == 1, exp.count <= 8, !(exp.count == 1 && last == 1) else {
            throw KeyError.rsaExponentInvalid
        }
        // OSSL_PARAM_BLD stores BIGNUMs by reference until the params are built: free them only after.
        guard let n = BN_bin2bn(modulus, Int32(modulus.count), nil) else { throw KeyError.openSSL("BN_bin2bn") }
        defer { BN_free(n) }
        guard let e = BN_bin2bn(Array(exp), Int32(exp.count), nil) else { throw KeyError.openSSL("BN_bin2bn") }
        defer { BN_free(e) }
        let pkey = try PublicKey.fromData(keyTypeName: "RSA") { builder in
            OSSL_PARAM_BLD_push_BN(builder, tg_param_rsa_n(), n) == 1
                && OSSL_PARAM_BLD_push_BN(builder, tg_param_rsa_e(), e) == 1
        }
        self.init(takingOwnershipOf: pkey, keyType: .rsa)
    }

    /// An EC public key from its affine coordinates; the point must lie on the curve.
    public convenience init(curve: EllipticCurve, x: [UInt8], y: [UInt8]) throws {
        let size = curve.coordinateByteCount
        guard x.count == size else { throw KeyError.ecCoordinateLength(expected: size, actual: x.count) }
        guard y.count == size else { throw KeyError.ecCoordinateLength(expected: size, actual: y.count) }
        let point: [UInt8] = [0x04] + x + y
        let pkey: OpaquePointer
        do {
            // The builder keeps pointers to the group name and the point until it builds: both stay in scope.
            pkey = try curve.openSSLGroupName.withCString { group in
                try point.withUnsafeBytes { raw in
                    try PublicKey.fromData(keyTypeName: "EC") { builder in
                        OSSL_PARAM_BLD_push_utf8_string(builder, tg_param_group_name(), group, 0) == 1
                            && OSSL_PARAM_BLD_push_octet_string(builder, tg_param_pub_key(), raw.baseAddress, raw.count) == 1
                    }
                }
            }
        } catch {
            // EVP_PKEY_fromdata decodes the point with EC_POINT_oct2point, which refuses points off the curve.
            throw KeyError.ecPointNotOnCurve
        }
        // Belt and braces: a full public-key check (on curve, not infinity, correct order).
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else {
            EVP_PKEY_free(pkey)
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_CTX_new_from_pkey").description)
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_public_check(ctx) == 1 else {
            _ = OpenSSLError.drainErrorQueue()
            EVP_PKEY_free(pkey)
            throw KeyError.ecPointNotOnCurve
        }
        self.init(takingOwnershipOf: pkey, keyType: .ec(curve))
    }

    /// An Ed25519 public key from its 32 raw bytes (RFC 8037 `x`).
    public convenience init(ed25519 x: [UInt8]) throws {
        guard x.count == 32 else { throw KeyError.ed25519KeyLength(x.count) }
        guard let pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, x, 32) else {
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_new_raw_public_key").description)
        }
        self.init(takingOwnershipOf: pkey, keyType: .ed25519)
    }

    /// Runs `push` to fill an `OSSL_PARAM_BLD`, then builds an `EVP_PKEY` holding only public material.
    private static func fromData(
        keyTypeName: String,
        push: (OpaquePointer) -> Bool
    ) throws -> OpaquePointer {
        guard let builder = OSSL_PARAM_BLD_new() else { throw KeyError.openSSL(OpenSSLError("OSSL_PARAM_BLD_new").description) }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard push(builder), let params = OSSL_PARAM_BLD_to_param(builder) else {
            throw KeyError.openSSL(OpenSSLError("OSSL_PARAM_BLD").description)
        }
        defer { OSSL_PARAM_free(params) }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, keyTypeName, nil) else {
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_CTX_new_from_name").description)
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var pkey: OpaquePointer? = nil
        guard EVP_PKEY_fromdata_init(ctx) == 1,
            EVP_PKEY_fromdata(ctx, &pkey, tg_evp_pkey_public_key_selection(), params) == 1,
            let built = pkey
        else {
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_fromdata").description)
        }
        return built
    }
}

/// An `EVP_MD_CTX` initialised for verification with one key and algorithm, used only as a source for
/// `EVP_MD_CTX_copy_ex`; it is never updated or finalised itself.
///
/// `@unchecked Sendable`: after init the context is only read (copied), which OpenSSL does without mutating
/// it beyond atomic reference counts.
final class VerificationTemplate: @unchecked Sendable {
    let context: OpaquePointer

    init?(key: PublicKey, algorithm: SignatureAlgorithm) {
        guard let ctx = EVP_MD_CTX_new() else { return nil }
        var pctx: OpaquePointer? = nil
        var ok = EVP_DigestVerifyInit(ctx, &pctx, algorithm.digest?.md, nil, key.pkey) == 1
        if ok && algorithm.usesPSS {
            ok =
                pctx != nil
                && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1
                && EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, tg_rsa_pss_saltlen_digest()) == 1
                && EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, algorithm.digest?.md) == 1
        }
        guard ok else {
            _ = OpenSSLError.drainErrorQueue()
            EVP_MD_CTX_free(ctx)
            return nil
        }
        context = ctx
    }

    deinit { EVP_MD_CTX_free(context) }
}
