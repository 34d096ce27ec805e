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
            right.withContiguousStorageIfAvailable { r in l.elementsEqual(r) }
        }), let equal = result {
            return equal
        }
        return left.elementsEqual(right)
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

    public var string: String { String(decoding: bytes, as: UTF8.self) }
}

/// The compact JWS alphabet: a token with any other byte is refused before any cache, store or key lookup.
public enum CompactJWSAlphabet {
    /// True when every byte is `A–Z a–z 0–9 - _ .`.
    @inlinable
    public static func admits(_ token: String) -> Bool {
        token.utf8.withContiguousStorageIfAvailable { admits(bytes: $0) } ?? admits(bytes: token.utf8)
    }

    @inlinable
    public static func admits<C: Collection<UInt8>>(bytes: C) -> Bool { bytes.allSatisfy(isAllowed) }

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
}
