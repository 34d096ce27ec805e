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
        return unsafe withContiguousBytes(signature) { signaturePointer, signatureCount in
            unsafe withContiguousBytes(message) { messagePointer, messageCount in
                unsafe verify(
                    signature: UnsafeBufferPointer(start: signaturePointer, count: signatureCount),
                    message: UnsafeBufferPointer(start: messagePointer, count: messageCount), key: key, algorithm: algorithm)
            }
        }
    }

    /// The same over buffers (no generic dispatch on the hot path). A buffer with no address stands for no bytes.
    public static func verify(
        signature: UnsafeBufferPointer<UInt8>, message: UnsafeBufferPointer<UInt8>, key: PublicKey, algorithm: SignatureAlgorithm
    ) -> Result<Void, Failure> {
        guard algorithm.keyType == key.keyType else { return .failure(.keyTypeMismatch) }
        // OpenSSL wants a valid pointer even for zero bytes.
        return unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { empty in
            let signaturePointer = unsafe signature.baseAddress ?? UnsafePointer(empty.baseAddress)
            let signatureCount = signature.count
            let messagePointer = unsafe message.baseAddress ?? UnsafePointer(empty.baseAddress)
            let messageCount = message.count
            let raw = unsafe UnsafeBufferPointer(start: signaturePointer, count: signatureCount)
            if case .ec(let curve) = key.keyType {
                // The DER form is at most 2 × (coordinate + 3) + 3 bytes: written on the stack, not in arrays.
                return unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * curve.coordinateByteCount + 9) { der in
                    switch unsafe ECDSASignature.derFromRaw(raw, curve: curve, into: der) {
                    case .failure(let failure): return .failure(failure)
                    case .success(let count):
                        let ok = unsafe verifyDigest(
                            UnsafeBufferPointer(rebasing: der[..<count]), messagePointer, messageCount, key: key, algorithm: algorithm)
                        return ok ? .success(()) : .failure(.mismatch)
                    }
                }
            }
            if key.keyType == .rsa && signatureCount != (key.bits + 7) / 8 { return .failure(.badSignatureLength) }
            let ok = unsafe verifyDigest(raw, messagePointer, messageCount, key: key, algorithm: algorithm)
            return ok ? .success(()) : .failure(.mismatch)
        }
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
        _ signature: UnsafeBufferPointer<UInt8>,
        _ message: UnsafePointer<UInt8>?,
        _ messageCount: Int,
        key: PublicKey,
        algorithm: SignatureAlgorithm
    ) -> Bool {
        if let digestAlgorithm = algorithm.digest {
            // Hash once with the fetched digest (into a stack buffer, on the pooled context's reused EVP_MD_CTX), then
            // verify the digest on its already initialised EVP_PKEY_CTX: the per-call cost is OpenSSL's verify itself,
            // as in the raw limit, plus the hash.
            return unsafe key.withVerifyContext(for: algorithm) { context in
                unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digest in
                    var size: UInt32 = 0
                    guard unsafe EVP_DigestInit_ex2(context.digest, digestAlgorithm.md, nil) == 1,
                        unsafe EVP_DigestUpdate(context.digest, message, messageCount) == 1,
                        unsafe EVP_DigestFinal_ex(context.digest, digest.baseAddress, &size) == 1,
                        Int(size) == digestAlgorithm.outputByteCount
                    else {
                        _ = OpenSSLError.drainErrorQueue()
                        return false
                    }
                    let result = unsafe EVP_PKEY_verify(context.verify, signature.baseAddress, signature.count, digest.baseAddress, Int(size))
                    if result != 1 { _ = OpenSSLError.drainErrorQueue() }
                    return result == 1
                }
            } ?? false
        }
        // Ed25519 has no pre-hashed form: copy an initialised context (cheaper than initialising one).
        guard let template = key.verificationTemplate(for: algorithm), let ctx = unsafe EVP_MD_CTX_new() else { return false }
        defer { unsafe EVP_MD_CTX_free(ctx) }
        guard unsafe EVP_MD_CTX_copy_ex(ctx, template.context) == 1 else {
            _ = OpenSSLError.drainErrorQueue()
            return false
        }
        let result = unsafe EVP_DigestVerify(ctx, signature.baseAddress, signature.count, message, messageCount)
        if result != 1 { _ = OpenSSLError.drainErrorQueue() }
        return result == 1
    }
}

/// JWS ECDSA signatures are raw `r || s` (IEEE P1363); OpenSSL wants DER. This converts, strictly.
enum ECDSASignature {
    /// The DER form of `raw`, as an array (tests and callers that hold no buffer).
    static func derFromRaw(_ raw: some Collection<UInt8>, curve: EllipticCurve) -> Result<[UInt8], SignatureVerifier.Failure> {
        let bytes = Array(raw)
        return unsafe bytes.withUnsafeBufferPointer { input in
            unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * curve.coordinateByteCount + 9) { der in
                unsafe derFromRaw(input, curve: curve, into: der).map { unsafe Array(der[..<$0]) }
            }
        }
    }

    /// Writes the DER form of `raw` into `der` (at least 2 × coordinate + 9 bytes); returns the bytes written.
    static func derFromRaw(
        _ raw: UnsafeBufferPointer<UInt8>, curve: EllipticCurve, into der: UnsafeMutableBufferPointer<UInt8>
    ) -> Result<Int, SignatureVerifier.Failure> {
        let size = curve.coordinateByteCount
        guard raw.count == 2 * size, der.count >= 2 * size + 9 else { return .failure(.badSignatureLength) }
        let r = unsafe UnsafeBufferPointer(rebasing: raw[0..<size])
        let s = unsafe UnsafeBufferPointer(rebasing: raw[size...])
        guard unsafe r.contains(where: { $0 != 0 }), unsafe s.contains(where: { $0 != 0 }) else { return .failure(.zeroComponent) }
        // Each INTEGER: the magnitude without leading zeros, with one 0x00 first when its top bit is set.
        func integerLength(_ magnitude: UnsafeBufferPointer<UInt8>) -> (start: Int, length: Int) {
            let start = unsafe magnitude.firstIndex(where: { $0 != 0 }) ?? magnitude.count
            let padded = unsafe start < magnitude.count && magnitude[start] & 0x80 != 0
            return (start, magnitude.count - start + (padded ? 1 : 0))
        }
        let (rStart, rLength) = unsafe integerLength(r)
        let (sStart, sLength) = unsafe integerLength(s)
        let bodyLength = 2 + rLength + 2 + sLength
        var position = 0
        func put(_ byte: UInt8) {
            unsafe der[position] = byte
            position += 1
        }
        func putInteger(_ magnitude: UnsafeBufferPointer<UInt8>, _ start: Int, _ length: Int) {
            put(0x02)
            put(UInt8(length))
            if length > magnitude.count - start { put(0) }
            // The magnitude in one copy (the length check above keeps it inside `der`).
            let count = magnitude.count - start
            unsafe UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: der[position..<(position + count)]))
                .copyMemory(from: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: magnitude[start...])))
            position += count
        }
        put(0x30)
        if bodyLength >= 0x80 { put(0x81) }
        put(UInt8(bodyLength))
        unsafe putInteger(r, rStart, rLength)
        unsafe putInteger(s, sStart, sLength)
        return .success(position)
    }
}
