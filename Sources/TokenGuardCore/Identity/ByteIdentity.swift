/// Tokens, nonces, kids, provider names, issuers and audiences are identities: sequences of bytes. Swift's
/// `String ==` and `String` hashing use Unicode canonical equivalence (U+212A KELVIN SIGN equals "K"), so two
/// different byte strings can compare equal. Every comparison of an identity goes through these instead.
extension String {
    /// True when both strings have exactly the same UTF-8 bytes.
    @inlinable
    public func sameBytes(as other: String) -> Bool {
        let left = utf8
        let right = other.utf8
        guard left.count == right.count else { return false }
        if let result = left.withContiguousStorageIfAvailable({ l in
            right.withContiguousStorageIfAvailable { r in ByteCompare.equal(UnsafeRawBufferPointer(l), UnsafeRawBufferPointer(r)) }
        }), let equal = result {
            return equal
        }
        return left.elementsEqual(right)
    }
}

extension String {
    /// True when this string's UTF-8 bytes are exactly `bytes`.
    @inlinable
    public func sameBytes(as bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let utf8 = utf8
        guard utf8.count == bytes.count else { return false }
        return utf8.withContiguousStorageIfAvailable { ByteCompare.equal(UnsafeRawBufferPointer($0), UnsafeRawBufferPointer(bytes)) }
            ?? utf8.elementsEqual(bytes)
    }
}

/// Byte comparison a word at a time (tokens are compared on every verified-token cache hit).
@usableFromInline
enum ByteCompare {
    /// True when `bytes` holds a zero byte (looked for a word at a time: every verification checks its subject).
    static func containsZero(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let raw = UnsafeRawBufferPointer(bytes)
        var offset = 0
        // The classic zero-byte test: exact as to whether any byte of the word is zero.
        while offset + 8 <= raw.count {
            let word = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            if (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080 != 0 { return true }
            offset += 8
        }
        while offset < raw.count {
            if raw[offset] == 0 { return true }
            offset += 1
        }
        return false
    }

    /// True when both buffers, of the same length, hold the same bytes.
    @inlinable
    static func equal(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        let count = left.count
        var offset = 0
        // Four words per step, one branch for all four: a cached token is ~1 KB.
        while offset + 32 <= count {
            var difference =
                left.loadUnaligned(fromByteOffset: offset, as: UInt64.self) ^ right.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            difference |=
                left.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self) ^ right.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            difference |=
                left.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self) ^ right.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self)
            difference |=
                left.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self) ^ right.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self)
            if difference != 0 { return false }
            offset += 32
        }
        while offset + 8 <= count {
            if left.loadUnaligned(fromByteOffset: offset, as: UInt64.self) != right.loadUnaligned(fromByteOffset: offset, as: UInt64.self) {
                return false
            }
            offset += 8
        }
        while offset < count {
            if left[offset] != right[offset] { return false }
            offset += 1
        }
        return true
    }
}

extension Sequence where Element == String {
    /// True when some element has exactly the bytes of `value` (never Unicode equivalence).
    @inlinable
    public func containsBytes(_ value: String) -> Bool { contains { $0.sameBytes(as: value) } }
}

/// A string used as a dictionary or set key by its bytes: two keys are equal only when their UTF-8 bytes are.
public struct ByteKey: Hashable, Sendable {
    public let bytes: [UInt8]

    public init(_ string: String) { bytes = Array(string.utf8) }
    public init(bytes: [UInt8]) { self.bytes = bytes }

    // The bytes hashed and compared as one block (an array's own conformances go element by element).
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    public static func == (lhs: ByteKey, rhs: ByteKey) -> Bool {
        lhs.bytes.count == rhs.bytes.count && lhs.bytes.withUnsafeBytes { l in rhs.bytes.withUnsafeBytes { r in ByteCompare.equal(l, r) } }
    }

    public var string: String { String(decoding: bytes, as: UTF8.self) }
}

/// The compact JWS alphabet: a token with any other byte is refused before any cache, store or key lookup.
public enum CompactJWSAlphabet {
    /// True when every byte is `A–Z a–z 0–9 - _ .`.
    @inlinable
    public static func admits(_ token: String) -> Bool {
        token.utf8.withContiguousStorageIfAvailable { admits(buffer: $0) } ?? admits(bytes: token.utf8)
    }

    @inlinable
    public static func admits<C: Collection<UInt8>>(bytes: C) -> Bool { bytes.allSatisfy(isAllowed) }

    /// Eight bytes at a time (SWAR): this runs before every verified-token cache lookup, so a 1 KB token must cost
    /// a small fraction of a cache hit. For bytes below 0x80, `byte + (0x80 - lo)` sets the byte's high bit exactly
    /// when `byte >= lo`, and `byte + (0x7F - hi)` exactly when `byte > hi`; no sum carries into the next byte.
    @inlinable
    static func admits(buffer: UnsafeBufferPointer<UInt8>) -> Bool {
        let raw = UnsafeRawBufferPointer(buffer)
        let count = raw.count
        var offset = 0
        while offset + 8 <= count {
            let word = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            guard word & highBits == 0, inRanges(word) == highBits else { return false }
            offset += 8
        }
        while offset < count {
            guard isAllowed(raw[offset]) else { return false }
            offset += 1
        }
        return true
    }

    @usableFromInline static let highBits: UInt64 = 0x8080_8080_8080_8080
    @usableFromInline static let ones: UInt64 = 0x0101_0101_0101_0101

    /// The high bit of each byte of `word` (all below 0x80) set when the byte is allowed.
    @inlinable
    static func inRanges(_ word: UInt64) -> UInt64 {
        @inline(__always) func range(_ low: UInt64, _ high: UInt64) -> UInt64 {
            ((word &+ (0x80 - low) &* ones) & ~(word &+ (0x7F - high) &* ones)) & highBits
        }
        return range(0x2D, 0x2E) | range(0x30, 0x39) | range(0x41, 0x5A) | range(0x5F, 0x5F) | range(0x61, 0x7A)
    }

    @inlinable
    public static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
            true
        default: false
        }
    }

    /// The message given with `malformed_token` for such a token.
    public static let refusal = "the token contains a byte outside the base64url alphabet and \".\" (a compact JWS is ASCII)"
}

/// ASCII-only case folding: no locale, no Unicode case mapping (which would let non-ASCII letters fold to ASCII).
public enum ASCII {
    public static func lowercased(_ text: String) -> String {
        String(decoding: text.utf8.map { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    public static func uppercased(_ text: String) -> String {
        String(decoding: text.utf8.map { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) ? $0 & 0xDF : $0 }, as: UTF8.self)
    }

    /// True when ``lowercased(_:)`` of `text` has exactly the bytes of `other`, without making that string.
    public static func lowercased(_ text: String, hasBytesOf other: String) -> Bool {
        let (left, right) = (text.utf8, other.utf8)
        guard left.count == right.count else { return false }
        @inline(__always) func folded(_ a: UInt8) -> UInt8 { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(a) ? a | 0x20 : a }
        let inPlace = left.withContiguousStorageIfAvailable { l in
            right.withContiguousStorageIfAvailable { r in
                for index in 0..<l.count where folded(l[index]) != r[index] { return false }
                return true
            }
        }
        if let inPlace, let result = inPlace { return result }
        return zip(left, right).allSatisfy { a, b in folded(a) == b }
    }

    /// True when both have the same bytes up to ASCII letter case (header names; never Unicode case folding).
    public static func equalIgnoringCase(_ left: String, _ right: String) -> Bool {
        guard left.utf8.count == right.utf8.count else { return false }
        func same(_ a: UInt8, _ b: UInt8) -> Bool {
            a == b || (a | 0x20 == b | 0x20 && (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(a | 0x20))
        }
        // In place (every native string): a forward-auth check compares each header's name this way.
        let inPlace = left.utf8.withContiguousStorageIfAvailable { l in
            right.utf8.withContiguousStorageIfAvailable { r in
                for index in 0..<l.count where !same(l[index], r[index]) { return false }
                return true
            }
        }
        if let inPlace, let result = inPlace { return result }
        return zip(left.utf8, right.utf8).allSatisfy(same)
    }
}

/// Text that reached tokenguard through a lossy decoding (HTTP header values, command-line arguments, which arrive as
/// Swift strings) has each byte that was not UTF-8 replaced by U+FFFD: three bytes that were never sent. A token or
/// nonce holding one is not the bytes the client sent, so it is judged for that byte, never by a count or hash of it.
public enum LossyText {
    /// The refusal of a token that holds one, over the limit as counted: what was sent is not known, but not a token.
    public static let tokenRefusal = "the token holds a byte that was not UTF-8 text (it arrived as U+FFFD): tokens are ASCII"

    /// Whether the bytes hold U+FFFD (EF BF BD).
    public static func holdsReplacement(_ bytes: some Collection<UInt8>) -> Bool {
        var matched = 0
        for byte in bytes {
            switch (matched, byte) {
            case (_, 0xEF): matched = 1
            case (1, 0xBF): matched = 2
            case (2, 0xBD): return true
            default: matched = 0
            }
        }
        return false
    }
}
