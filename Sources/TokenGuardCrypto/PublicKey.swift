import COpenSSL
import Synchronization
import TokenGuardSync

/// A parsed public key, owning one OpenSSL `EVP_PKEY` for its whole life.
///
/// Built once from a JWK and reused for every verification. `@unchecked Sendable` is sound: the pointer
/// is immutable after init, freed only in `deinit`, and verify-only use of an `EVP_PKEY` is thread-safe
/// in OpenSSL 3 (each verification makes its own `EVP_MD_CTX`).
@safe public final class PublicKey: @unchecked Sendable {
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
        /// The encoding's y coordinate is not below the field prime (RFC 8032 §5.1.3 refuses it).
        case ed25519NonCanonical
        /// One of the eight points of small order (the identity among them): any signature "verifies" under
        /// some of them, so such a key proves nothing.
        case ed25519SmallOrder
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
    /// Idle contexts for verifying a digest, per algorithm. A verification takes one (or makes one), uses it alone,
    /// and puts it back.
    private let verifyContexts = VerifyContextPool()

    init(takingOwnershipOf pkey: OpaquePointer, keyType: KeyType) {
        unsafe self.pkey = unsafe pkey
        self.keyType = keyType
        self.bits = unsafe Int(EVP_PKEY_get_bits(pkey))
    }

    deinit {
        // The contexts first: each one was made from `pkey`.
        verifyContexts.freeIdleContexts()
        unsafe EVP_PKEY_free(pkey)
    }

    /// Runs `body` with a context set up for `EVP_PKEY_verify` of a digest under `algorithm` (and one to compute that
    /// digest in), used by this call alone; nil when OpenSSL cannot make them.
    func withVerifyContext(for algorithm: SignatureAlgorithm, _ body: (VerifyContextPool.Context) -> Bool) -> Bool? {
        guard let box = unsafe verifyContexts.take(algorithm) ?? makeVerifyContext(for: algorithm) else { return nil }
        let result = unsafe body(box.pointee)
        unsafe verifyContexts.put(box, algorithm)
        return result
    }

    private func makeVerifyContext(for algorithm: SignatureAlgorithm) -> UnsafeMutablePointer<VerifyContextPool.Context>? {
        guard let md = unsafe EVP_MD_CTX_new() else { return nil }
        guard let ctx = unsafe makePKeyContext(for: algorithm) else {
            unsafe EVP_MD_CTX_free(md)
            return nil
        }
        return unsafe VerifyContextPool.make(verify: ctx, digest: md)
    }

    private func makePKeyContext(for algorithm: SignatureAlgorithm) -> OpaquePointer? {
        guard let digest = algorithm.digest, let ctx = unsafe EVP_PKEY_CTX_new(pkey, nil) else { return nil }
        var ok = unsafe EVP_PKEY_verify_init(ctx) == 1 && EVP_PKEY_CTX_set_signature_md(ctx, digest.md) == 1
        if ok && algorithm.usesPSS {
            ok =
                unsafe EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PSS_PADDING) == 1
                && EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, tg_rsa_pss_saltlen_digest()) == 1
                && EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, digest.md) == 1
        } else if ok && keyType == .rsa {
            ok = unsafe EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1
        }
        guard ok else {
            _ = OpenSSLError.drainErrorQueue()
            unsafe EVP_PKEY_CTX_free(ctx)
            return nil
        }
        return unsafe ctx
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
        guard let n = unsafe BN_bin2bn(modulus, Int32(modulus.count), nil) else { throw KeyError.openSSL("BN_bin2bn") }
        defer { unsafe BN_free(n) }
        guard let e = unsafe BN_bin2bn(Array(exp), Int32(exp.count), nil) else { throw KeyError.openSSL("BN_bin2bn") }
        defer { unsafe BN_free(e) }
        let pkey = try unsafe PublicKey.fromData(keyTypeName: "RSA") { builder in
            unsafe OSSL_PARAM_BLD_push_BN(builder, tg_param_rsa_n(), n) == 1
                && OSSL_PARAM_BLD_push_BN(builder, tg_param_rsa_e(), e) == 1
        }
        unsafe self.init(takingOwnershipOf: pkey, keyType: .rsa)
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
            unsafe pkey = try unsafe curve.openSSLGroupName.withCString { group in
                try unsafe point.withUnsafeBytes { raw in
                    try unsafe PublicKey.fromData(keyTypeName: "EC") { builder in
                        unsafe OSSL_PARAM_BLD_push_utf8_string(builder, tg_param_group_name(), group, 0) == 1
                            && OSSL_PARAM_BLD_push_octet_string(builder, tg_param_pub_key(), raw.baseAddress, raw.count) == 1
                    }
                }
            }
        } catch {
            // EVP_PKEY_fromdata decodes the point with EC_POINT_oct2point, which refuses points off the curve.
            throw KeyError.ecPointNotOnCurve
        }
        // Belt and braces: a full public-key check (on curve, not infinity, correct order).
        guard let ctx = unsafe EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else {
            unsafe EVP_PKEY_free(pkey)
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_CTX_new_from_pkey").description)
        }
        defer { unsafe EVP_PKEY_CTX_free(ctx) }
        guard unsafe EVP_PKEY_public_check(ctx) == 1 else {
            _ = OpenSSLError.drainErrorQueue()
            unsafe EVP_PKEY_free(pkey)
            throw KeyError.ecPointNotOnCurve
        }
        unsafe self.init(takingOwnershipOf: pkey, keyType: .ec(curve))
    }

    /// An Ed25519 public key from its 32 raw bytes (RFC 8037 `x`).
    public convenience init(ed25519 x: [UInt8]) throws {
        guard x.count == 32 else { throw KeyError.ed25519KeyLength(x.count) }
        try Self.checkEd25519Encoding(x)
        guard let pkey = unsafe EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, x, 32) else {
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_new_raw_public_key").description)
        }
        unsafe self.init(takingOwnershipOf: pkey, keyType: .ed25519)
    }

    /// The field prime 2^255 - 19, little-endian.
    private static let ed25519Prime: [UInt8] = [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f]

    /// The y coordinates (little-endian, sign bit clear) of the eight small-order points: 0 and p-1 (orders 4
    /// and 2), 1 (the identity) and the two of order 8; each with either sign of x.
    private static let ed25519SmallOrderY: [[UInt8]] = [
        [UInt8](repeating: 0, count: 32),
        [1] + [UInt8](repeating: 0, count: 31),
        [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
            0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
        ],
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
            0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
        ],
    ]

    /// Refuses non-canonical encodings (y ≥ p) and small-order points before OpenSSL sees the key.
    static func checkEd25519Encoding(_ x: [UInt8]) throws {
        var y = x
        y[31] &= 0x7f
        // Compare y with p from the most significant byte down.
        var belowPrime = false
        for index in stride(from: 31, through: 0, by: -1) where y[index] != ed25519Prime[index] {
            belowPrime = y[index] < ed25519Prime[index]
            break
        }
        guard belowPrime else { throw KeyError.ed25519NonCanonical }
        if ed25519SmallOrderY.contains(y) { throw KeyError.ed25519SmallOrder }
    }

    /// Runs `push` to fill an `OSSL_PARAM_BLD`, then builds an `EVP_PKEY` holding only public material.
    private static func fromData(
        keyTypeName: String,
        push: (OpaquePointer) -> Bool
    ) throws -> OpaquePointer {
        guard let builder = unsafe OSSL_PARAM_BLD_new() else { throw KeyError.openSSL(OpenSSLError("OSSL_PARAM_BLD_new").description) }
        defer { unsafe OSSL_PARAM_BLD_free(builder) }
        guard unsafe push(builder), let params = unsafe OSSL_PARAM_BLD_to_param(builder) else {
            throw KeyError.openSSL(OpenSSLError("OSSL_PARAM_BLD").description)
        }
        defer { unsafe OSSL_PARAM_free(params) }
        guard let ctx = unsafe EVP_PKEY_CTX_new_from_name(nil, keyTypeName, nil) else {
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_CTX_new_from_name").description)
        }
        defer { unsafe EVP_PKEY_CTX_free(ctx) }
        var pkey: OpaquePointer? = nil
        guard unsafe EVP_PKEY_fromdata_init(ctx) == 1,
            unsafe EVP_PKEY_fromdata(ctx, &pkey, tg_evp_pkey_public_key_selection(), params) == 1,
            let built = unsafe pkey
        else {
            throw KeyError.openSSL(OpenSSLError("EVP_PKEY_fromdata").description)
        }
        return unsafe built
    }
}

/// An `EVP_MD_CTX` initialised for verification with one key and algorithm, used only as a source for
/// `EVP_MD_CTX_copy_ex`; it is never updated or finalised itself.
///
/// `@unchecked Sendable`: after init the context is only read (copied), which OpenSSL does without mutating
/// it beyond atomic reference counts.
@safe final class VerificationTemplate: @unchecked Sendable {
    let context: OpaquePointer

    init?(key: PublicKey, algorithm: SignatureAlgorithm) {
        guard let ctx = unsafe EVP_MD_CTX_new() else { return nil }
        var pctx: OpaquePointer? = nil
        var ok = unsafe EVP_DigestVerifyInit(ctx, &pctx, algorithm.digest?.md, nil, key.pkey) == 1
        if ok && algorithm.usesPSS {
            ok =
                unsafe pctx != nil
                && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1
                && EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, tg_rsa_pss_saltlen_digest()) == 1
                && EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, algorithm.digest?.md) == 1
        }
        guard ok else {
            _ = OpenSSLError.drainErrorQueue()
            unsafe EVP_MD_CTX_free(ctx)
            return nil
        }
        unsafe context = unsafe ctx
    }

    deinit { unsafe EVP_MD_CTX_free(context) }
}

extension PublicKey.KeyError: CustomStringConvertible {
    /// The reason shown for a skipped JWKS key (`skipped_keys`, `tokenguard keys`, `unknown_key` messages).
    public var description: String {
        switch self {
        case .rsaModulusTooSmall(let bits): "RSA modulus of \(bits) bits is below \(PublicKey.minimumRSABits)"
        case .rsaModulusTooLarge(let bits): "RSA modulus of \(bits) bits is above \(PublicKey.maximumRSABits)"
        case .rsaExponentInvalid: "RSA exponent is not an odd number above 1 of at most 64 bits"
        case .ecCoordinateLength(let expected, let actual): "EC coordinate is \(actual) bytes; the curve needs \(expected)"
        case .ecPointNotOnCurve: "EC point is not a valid point on the curve"
        case .ed25519KeyLength(let count): "Ed25519 x is \(count) bytes; it must be 32"
        case .ed25519NonCanonical: "Ed25519 x is a non-canonical encoding (y not below 2^255-19)"
        case .ed25519SmallOrder: "Ed25519 x is a small-order point, which would accept forged signatures"
        case .openSSL(let message): "OpenSSL refused the key: \(message)"
        }
    }
}
