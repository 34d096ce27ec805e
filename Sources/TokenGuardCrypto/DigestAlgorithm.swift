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
        var size: UInt32 = 0
        let ok: Int32 =
            bytes.withContiguousStorageIfAvailable { buffer in
                unsafe EVP_Digest(buffer.baseAddress, buffer.count, &out, &size, DigestAlgorithm.sha256.md, nil)
            }
            ?? (unsafe Array(bytes).withUnsafeBufferPointer { buffer in
                unsafe EVP_Digest(buffer.baseAddress, buffer.count, &out, &size, DigestAlgorithm.sha256.md, nil)
            })
        precondition(ok == 1 && size == 32, "EVP_Digest(SHA-256) failed: out of memory")
        return out
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

    /// The same over a buffer (no generic dispatch: a nonce check runs this on every verification).
    public static func withHexDigest<R>(of bytes: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 96) { scratch in
            guard let digest = scratch.baseAddress else { preconditionFailure("a temporary allocation of 96 bytes has an address") }
            let hex = unsafe digest + 32
            var size: UInt32 = 0
            // EVP_Digest wants an address even for no bytes.
            let ok: Int32 = unsafe withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { empty in
                unsafe EVP_Digest(bytes.baseAddress ?? UnsafePointer(empty.baseAddress), bytes.count, digest, &size, DigestAlgorithm.sha256.md, nil)
            }
            precondition(ok == 1 && size == 32, "EVP_Digest(SHA-256) failed: out of memory")
            for index in 0..<32 {
                let byte = unsafe digest[index]
                unsafe hex[2 * index] = Hex.digit(byte >> 4)
                unsafe hex[2 * index + 1] = Hex.digit(byte & 0x0F)
            }
            return unsafe body(UnsafeBufferPointer(start: hex, count: 64))
        }
    }
}

public enum Hex {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// The lowercase hex digit for a value below 16.
    @inline(__always)
    static func digit(_ value: UInt8) -> UInt8 { value < 10 ? value &+ 0x30 : value &+ 0x57 }

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
