import COpenSSL

/// Verifies a JWS signature with OpenSSL's `EVP_DigestVerify`.
public enum SignatureVerifier {
    /// Why a signature was refused before or by OpenSSL. All of these mean `invalid_signature` to a user.
    public enum Failure: Error, Sendable, Equatable {
        /// The algorithm does not fit the key's type (e.g. ES256 with an RSA key).
        case keyTypeMismatch
        /// An ECDSA signature that is not exactly `2 × coordinate` bytes (RFC 7518 §3.4), e.g. DER.
        case badSignatureLength
        /// ECDSA `r` or `s` is zero.
        case zeroComponent
        /// OpenSSL computed the signature as not matching.
        case mismatch
    }

    /// Verifies `signature` over `message` with `key` under `algorithm`.
    ///
    /// The algorithm must be bound to the key's type; that binding is checked here as well as by callers,
    /// so the crypto layer alone can never verify, say, an HMAC or an RSA token with an EC key.
    public static func verify(
        signature: some Collection<UInt8>,
        message: some Collection<UInt8>,
        key: PublicKey,
        algorithm: SignatureAlgorithm
    ) -> Result<Void, Failure> {
        guard algorithm.keyType == key.keyType else { return .failure(.keyTypeMismatch) }
        let signatureBytes: [UInt8]
        if case .ec(let curve) = key.keyType {
            switch ECDSASignature.derFromRaw(signature, curve: curve) {
            case .success(let der): signatureBytes = der
            case .failure(let failure): return .failure(failure)
            }
        } else {
            if key.keyType == .rsa && signature.count != (key.bits + 7) / 8 { return .failure(.badSignatureLength) }
            signatureBytes = Array(signature)
        }
        let ok = unsafe withContiguousBytes(message) { messagePointer, messageCount in
            unsafe verifyDigest(signatureBytes, messagePointer, messageCount, key: key, algorithm: algorithm)
        }
        return ok ? .success(()) : .failure(.mismatch)
    }

    private static func withContiguousBytes<C: Collection<UInt8>, R>(
        _ bytes: C,
        _ body: (UnsafePointer<UInt8>?, Int) -> R
    ) -> R {
        // OpenSSL wants a valid pointer even for zero bytes, and an empty Swift buffer has none.
        if bytes.isEmpty { return unsafe [UInt8(0)].withUnsafeBufferPointer { unsafe body($0.baseAddress, 0) } }
        if let result = bytes.withContiguousStorageIfAvailable({ unsafe body($0.baseAddress, $0.count) }) { return result }
        return unsafe Array(bytes).withUnsafeBufferPointer { unsafe body($0.baseAddress, $0.count) }
    }

    private static func verifyDigest(
        _ signature: [UInt8],
        _ message: UnsafePointer<UInt8>?,
        _ messageCount: Int,
        key: PublicKey,
        algorithm: SignatureAlgorithm
    ) -> Bool {
        if let digestAlgorithm = algorithm.digest {
            // Hash once with the fetched digest, then verify the digest on a pooled, already initialised
            // EVP_PKEY_CTX: the per-call cost is OpenSSL's verify itself, as in the raw limit.
            var digest = [UInt8](repeating: 0, count: digestAlgorithm.outputByteCount)
            var size: UInt32 = 0
            guard unsafe EVP_Digest(message, messageCount, &digest, &size, digestAlgorithm.md, nil) == 1 else {
                _ = OpenSSLError.drainErrorQueue()
                return false
            }
            return unsafe key.withVerifyContext(for: algorithm) { ctx in
                let result = unsafe EVP_PKEY_verify(ctx, signature, signature.count, digest, Int(size))
                if result != 1 { _ = OpenSSLError.drainErrorQueue() }
                return result == 1
            } ?? false
        }
        // Ed25519 has no pre-hashed form: copy an initialised context (cheaper than initialising one).
        guard let template = key.verificationTemplate(for: algorithm), let ctx = unsafe EVP_MD_CTX_new() else { return false }
        defer { unsafe EVP_MD_CTX_free(ctx) }
        guard unsafe EVP_MD_CTX_copy_ex(ctx, template.context) == 1 else {
            _ = OpenSSLError.drainErrorQueue()
            return false
        }
        let result = unsafe signature.withUnsafeBufferPointer { sig in
            unsafe EVP_DigestVerify(ctx, sig.baseAddress, sig.count, message, messageCount)
        }
        if result != 1 { _ = OpenSSLError.drainErrorQueue() }
        return result == 1
    }
}

/// JWS ECDSA signatures are raw `r || s` (IEEE P1363); OpenSSL wants DER. This converts, strictly.
enum ECDSASignature {
    static func derFromRaw(_ raw: some Collection<UInt8>, curve: EllipticCurve) -> Result<[UInt8], SignatureVerifier.Failure> {
        let size = curve.coordinateByteCount
        let bytes = Array(raw)
        guard bytes.count == 2 * size else { return .failure(.badSignatureLength) }
        let r = bytes[0..<size]
        let s = bytes[size...]
        guard r.contains(where: { $0 != 0 }), s.contains(where: { $0 != 0 }) else { return .failure(.zeroComponent) }
        let rDER = derInteger(r)
        let sDER = derInteger(s)
        let body = rDER + sDER
        return .success([0x30] + derLength(body.count) + body)
    }

    private static func derInteger(_ magnitude: ArraySlice<UInt8>) -> [UInt8] {
        var value = Array(magnitude.drop(while: { $0 == 0 }))
        if let first = value.first, first & 0x80 != 0 { value.insert(0, at: 0) }
        return [0x02] + derLength(value.count) + value
    }

    private static func derLength(_ count: Int) -> [UInt8] {
        count < 0x80 ? [UInt8(count)] : [0x81, UInt8(count)]
    }
}
