/// Strict base64url (RFC 4648 §5) without padding, as JWS requires (RFC 7515 §2).
///
/// Refuses padding, the standard alphabet's `+` and `/`, whitespace, impossible lengths and non-zero
/// trailing bits, so every byte string has exactly one accepted encoding: a token cannot be re-encoded
/// into a second form that a cache, a replay store or another verifier would treat as different.
public enum Base64URL {
    /// The decoding tables, plain memory made once and never freed, not arrays: an array in a global is
    /// reference-counted on every use, and two threads decoding at once would contend for that one count. One value
    /// for both, which a caller decoding several segments fetches once: on Linux every read of a global runs the
    /// lazy initializer's once-check, a runtime call.
    struct Tables: @unchecked Sendable {
        /// Each byte's 6-bit value, or 0xFF outside the alphabet.
        let values: UnsafePointer<UInt8>
        /// Four tables in one: entry `256 × k + byte` is the byte's 6-bit value shifted into place for position k of a
        /// 4-character group, or 0xFF00_0000 when the byte is not in the alphabet. A group is then four lookups ORed.
        let groups: UnsafePointer<UInt32>
    }

    // Written once by the initializer (run once, thread-safely), then only read.
    static let tables: Tables = {
        let values = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)
        values.initialize(repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for (index, byte) in alphabet.enumerated() { values[Int(byte)] = UInt8(index) }
        let groups = UnsafeMutablePointer<UInt32>.allocate(capacity: 1024)
        groups.initialize(repeating: 0xFF00_0000, count: 1024)
        for byte in 0..<256 where values[byte] != 0xFF {
            let value = UInt32(values[byte])
            groups[byte] = value << 18
            groups[256 + byte] = value << 12
            groups[512 + byte] = value << 6
            groups[768 + byte] = value
        }
        return Tables(values: UnsafePointer(values), groups: UnsafePointer(groups))
    }()

    private static let encodeTable: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Decodes, or returns nil for anything that is not canonical unpadded base64url.
    public static func decode(_ input: some Collection<UInt8>) -> [UInt8]? {
        if let result = input.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return result }
        return Array(input).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    public static func decode(_ string: String) -> [UInt8]? { decode(Array(string.utf8)) }

    static func decode(buffer: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard let outputCount = decodedCount(buffer.count) else { return nil }
        // See CompactJWS.decode: no `unsafeUninitializedCapacity: 0` (the shared empty storage's count is written).
        if outputCount == 0 { return [] }
        var refusal: Refusal? = nil
        let output = [UInt8](unsafeUninitializedCapacity: outputCount) { out, initialized in
            refusal = decode(buffer, into: out, tables: tables)
            initialized = outputCount
        }
        return refusal == nil ? output : nil
    }

    /// The number of bytes `count` characters decode to; nil for a length no canonical encoding has.
    static func decodedCount(_ count: Int) -> Int? {
        let remainder = count % 4
        if remainder == 1 { return nil }
        return count / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
    }

    /// Why a segment did not decode.
    enum Refusal {
        /// A byte outside the base64url alphabet (whatever else is wrong with the segment).
        case outsideAlphabet
        /// An impossible length (whatever bytes the segment holds: the length is judged first), or only the alphabet's
        /// bytes with non-zero trailing bits.
        case notCanonical
    }

    /// Decodes `buffer` into `out`, which holds exactly ``decodedCount(_:)`` bytes; nil when it did, else why
    /// `buffer` is not canonical unpadded base64url (`out` then holds garbage). The cause costs nothing extra: the
    /// loop collects both anyway, and a caller that knows the segment holds no dot can refuse a byte outside the
    /// alphabet without scanning the token again.
    static func decode(_ buffer: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>, tables: Tables = Base64URL.tables)
        -> Refusal?
    {
        let count = buffer.count
        let remainder = count % 4
        guard let expected = decodedCount(count), out.count == expected else { return .notCanonical }
        var valid = true
        do {
            let table = tables.values
            var index = 0
            var position = 0
            let fullEnd = count - remainder
            var bad: UInt8 = 0
            do {
                let groups = tables.groups
                var invalid: UInt32 = 0
                // Two groups at a time, their six bytes written with one 8-byte store whose last two bytes the next
                // store overwrites: while a group remains after the pair, those two bytes are still inside `out`.
                if let target = out.baseAddress {
                    let raw = UnsafeMutableRawPointer(target)
                    while index + 12 <= fullEnd {
                        let first = group(groups, buffer, at: index)
                        let second = group(groups, buffer, at: index + 4)
                        invalid |= first | second
                        let pair = UInt64(truncatingIfNeeded: first) << 40 | UInt64(truncatingIfNeeded: second) << 16
                        raw.storeBytes(of: pair.bigEndian, toByteOffset: position, as: UInt64.self)
                        index += 8
                        position += 6
                    }
                }
                while index < fullEnd {
                    let value = group(groups, buffer, at: index)
                    invalid |= value
                    out[position] = UInt8(truncatingIfNeeded: value >> 16)
                    out[position + 1] = UInt8(truncatingIfNeeded: value >> 8)
                    out[position + 2] = UInt8(truncatingIfNeeded: value)
                    index += 4
                    position += 3
                }
                if invalid & 0xFF00_0000 != 0 { bad = 0xFF }
            }
            if remainder == 2 {
                let a = table[Int(buffer[index])]
                let b = table[Int(buffer[index + 1])]
                bad |= a | b
                if b & 0x0F != 0 { valid = false }  // non-zero trailing bits: not canonical
                out[position] = a << 2 | b >> 4
                position += 1
            } else if remainder == 3 {
                let a = table[Int(buffer[index])]
                let b = table[Int(buffer[index + 1])]
                let c = table[Int(buffer[index + 2])]
                bad |= a | b | c
                if c & 0x03 != 0 { valid = false }
                out[position] = a << 2 | b >> 4
                out[position + 1] = (b & 0x0F) << 4 | c >> 2
                position += 2
            }
            // Invalid characters map to 0xFF, so any of them sets the top bits.
            if bad & 0xC0 != 0 { return .outsideAlphabet }
        }
        return valid ? nil : .notCanonical
    }

    /// The four characters at `index` as one group: their 24 bits in the low three bytes, the top byte non-zero when
    /// any of them is outside the alphabet (each character's own quarter of `groups` has its bits already in place).
    @inline(__always)
    private static func group(_ groups: UnsafePointer<UInt32>, _ buffer: UnsafeBufferPointer<UInt8>, at index: Int) -> UInt32 {
        groups[Int(buffer[index])] | groups[256 + Int(buffer[index + 1])] | groups[512 + Int(buffer[index + 2])]
            | groups[768 + Int(buffer[index + 3])]
    }

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var out = [UInt8]()
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(encodeTable[Int(value >> 18 & 0x3F)])
            out.append(encodeTable[Int(value >> 12 & 0x3F)])
            out.append(encodeTable[Int(value >> 6 & 0x3F)])
            out.append(encodeTable[Int(value & 0x3F)])
            index += 3
        }
        let rest = input.count - index
        if rest == 1 {
            let value = UInt32(input[index]) << 16
            out.append(encodeTable[Int(value >> 18 & 0x3F)])
            out.append(encodeTable[Int(value >> 12 & 0x3F)])
        } else if rest == 2 {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out.append(encodeTable[Int(value >> 18 & 0x3F)])
            out.append(encodeTable[Int(value >> 12 & 0x3F)])
            out.append(encodeTable[Int(value >> 6 & 0x3F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
