import COpenSSL

/// The message digests JWS algorithms use, fetched from OpenSSL's default provider once per process.
///
/// `EVP_sha256()` and friends trigger an implicit fetch on every use in OpenSSL 3; holding the fetched
/// `EVP_MD` avoids that cost on the hot path.
public enum DigestAlgorithm: Sendable {
    case sha256, sha384, sha512

    public var outputByteCount: Int {
        switch self {
        case .sha256: 32
        case .sha384: 48
        case .sha512: 64
        }
    }

    var md: OpaquePointer {
        switch self {
        case .sha256: unsafe FetchedDigests.shared.sha256
        case .sha384: unsafe FetchedDigests.shared.sha384
        case .sha512: unsafe FetchedDigests.shared.sha512
        }
    }
}

/// Holds the fetched `EVP_MD` objects for the life of the process.
///
/// `@unchecked Sendable`: the pointers are immutable after init and OpenSSL's `EVP_MD` objects are
/// reference-counted, read-only and documented as safe to share between threads.
@safe final class FetchedDigests: @unchecked Sendable {
    static let shared = FetchedDigests()
    let sha256: OpaquePointer
    let sha384: OpaquePointer
    let sha512: OpaquePointer

    private init() {
        // Fall back to the legacy constant getters if the explicit fetch is unavailable; both are valid EVP_MDs.
        unsafe sha256 = unsafe EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()
        unsafe sha384 = unsafe EVP_MD_fetch(nil, "SHA384", nil) ?? EVP_sha384()
        unsafe sha512 = unsafe EVP_MD_fetch(nil, "SHA512", nil) ?? EVP_sha512()
    }
}

public enum SHA256 {
    /// SHA-256 of `bytes`.
    public static func hash<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let ok =
            bytes.withContiguousStorageIfAvailable { buffer in unsafe out.withUnsafeMutableBufferPointer { unsafe digest(buffer, into: $0) } }
            ?? (unsafe Array(bytes).withUnsafeBufferPointer { buffer in unsafe out.withUnsafeMutableBufferPointer { unsafe digest(buffer, into: $0) }
            })
        precondition(ok, "SHA-256 failed")
        return out
    }

    /// SHA-256 of `bytes` into the first 32 bytes of `out`, without a heap allocation (``tg_sha256``).
    private static func digest(_ bytes: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Bool {
        guard out.count >= 32, let target = out.baseAddress else { return false }
        // OpenSSL wants an address even for no bytes.
        return unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { empty in
            unsafe tg_sha256(bytes.baseAddress ?? UnsafePointer(empty.baseAddress), bytes.count, target) == 1
        }
    }

    /// Lowercase hex of SHA-256(`bytes`): the form Firebase-style apps put in a token's `nonce`.
    public static func hexDigest<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        unsafe withHexDigest(of: bytes) { hex in unsafe String(decoding: hex, as: UTF8.self) }
    }

    /// Runs `body` with the lowercase hex of SHA-256(`bytes`) in a buffer on the stack (a nonce check compares it
    /// where it lies: no digest array, no string).
    public static func withHexDigest<Bytes: Collection<UInt8>, R>(of bytes: Bytes, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = bytes.withContiguousStorageIfAvailable({ unsafe withHexDigest(of: $0, body) }) { return result }
        return unsafe Array(bytes).withUnsafeBufferPointer { unsafe withHexDigest(of: $0, body) }
    }

    /// Whether `claimed` is the lowercase hex of SHA-256(`bytes`), compared in constant time: the nonce rule.
    ///
    /// Not generic, and its scratch a value on the stack: `withHexDigest(of:_:)` over a buffer,
    /// generic over its result and called from another module, runs unspecialised and instantiates `Result` metadata
    /// on every call (about 500 of a verification's 25,500 instructions outside OpenSSL, callgrind).
    public static func hexDigest(of bytes: UnsafeBufferPointer<UInt8>, equals claimed: UnsafeBufferPointer<UInt8>) -> Bool {
        guard claimed.count == 64 else { return false }
        var scratch: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        )
        return unsafe withUnsafeMutableBytes(of: &scratch) { raw in
            let buffer = unsafe raw.bindMemory(to: UInt8.self)
            precondition(unsafe digest(bytes, into: buffer), "SHA-256 failed")
            let hex = unsafe UnsafeMutableBufferPointer(rebasing: buffer[32..<96])
            unsafe Hex.lowercase(UnsafeBufferPointer(rebasing: buffer[..<32]), into: hex)
            return unsafe ConstantTime.equals(UnsafeBufferPointer(hex), claimed)
        }
    }

    /// The same over a buffer (no generic dispatch: a nonce check runs this on every verification).
    public static func withHexDigest<R>(of bytes: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 96) { scratch in
            precondition(unsafe digest(bytes, into: scratch), "SHA-256 failed")
            let hex = unsafe UnsafeMutableBufferPointer(rebasing: scratch[32...])
            unsafe Hex.lowercase(UnsafeBufferPointer(rebasing: scratch[..<32]), into: hex)
            return unsafe body(UnsafeBufferPointer(hex))
        }
    }
}

public enum Hex {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Each byte value's two lowercase hex digits, first digit in the low byte: one 16-bit store per byte. Plain memory
    /// made once and never freed, not an array: a global array is reference-counted on every use, a count that
    /// threads hashing nonces at once would contend for.
    // nonisolated(unsafe): written once by the initializer (run once, thread-safely), then only read.
    nonisolated(unsafe) private static let pairs: UnsafePointer<UInt16> = {
        let table = UnsafeMutablePointer<UInt16>.allocate(capacity: 256)
        for value in 0..<256 {
            unsafe table[value] = UInt16(digit(UInt8(value >> 4))) | UInt16(digit(UInt8(value & 0x0F))) << 8
        }
        return unsafe UnsafePointer(table)
    }()

    /// The lowercase hex digit for a value below 16.
    @inline(__always)
    static func digit(_ value: UInt8) -> UInt8 { value < 10 ? value &+ 0x30 : value &+ 0x57 }

    /// Writes the lowercase hex of `bytes` into `out` (at least twice as long).
    static func lowercase(_ bytes: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) {
        precondition(out.count >= 2 * bytes.count, "a hex buffer holds two digits per byte")
        guard let target = out.baseAddress else { return }
        let raw = UnsafeMutableRawPointer(target)
        for index in bytes.indices {
            unsafe raw.storeBytes(of: UInt16(littleEndian: pairs[Int(bytes[index])]), toByteOffset: 2 * index, as: UInt16.self)
        }
    }

    public static func lowercase<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

public enum HMAC {
    /// HMAC-SHA256 of `message` keyed by `key` (Facebook's `appsecret_proof`; tests forging HS256 tokens).
    public static func sha256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let keyBytes = key.isEmpty ? [0] : key
        let messageBytes = message.isEmpty ? [0] : message
        _ = unsafe COpenSSL.HMAC(DigestAlgorithm.sha256.md, keyBytes, Int32(key.count), messageBytes, message.count, &out, &length)
        return Array(out.prefix(Int(length)))
    }
}
