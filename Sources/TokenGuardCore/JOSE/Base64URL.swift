/// Strict base64url (RFC 4648 §5) without padding, as JWS requires (RFC 7515 §2).
///
/// Refuses padding, the standard alphabet's `+` and `/`, whitespace, impossible lengths and non-zero
/// trailing bits, so every byte string has exactly one accepted encoding: a token cannot be re-encoded
/// into a second form that a cache, a replay store or another verifier would treat as different.
public enum Base64URL {
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    private static let encodeTable: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Decodes, or returns nil for anything that is not canonical unpadded base64url.
    public static func decode(_ input: some Collection<UInt8>) -> [UInt8]? {
        if let result = input.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return result }
        return Array(input).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    public static func decode(_ string: String) -> [UInt8]? { decode(Array(string.utf8)) }

    static func decode(buffer: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = buffer.count
        let remainder = count % 4
        if remainder == 1 { return nil }
        var out = [UInt8]()
        out.reserveCapacity(count / 4 * 3 + 2)
        let table = decodeTable
        var index = 0
        let fullEnd = count - remainder
        while index < fullEnd {
            let a = table[Int(buffer[index])], b = table[Int(buffer[index + 1])]
            let c = table[Int(buffer[index + 2])], d = table[Int(buffer[index + 3])]
            if (a | b | c | d) & 0xC0 != 0 { return nil }
            let value = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
            out.append(UInt8(truncatingIfNeeded: value >> 16))
            out.append(UInt8(truncatingIfNeeded: value >> 8))
            out.append(UInt8(truncatingIfNeeded: value))
            index += 4
        }
        if remainder == 2 {
            let a = table[Int(buffer[index])], b = table[Int(buffer[index + 1])]
            if (a | b) & 0xC0 != 0 || b & 0x0F != 0 { return nil }  // non-zero trailing bits: not canonical
            out.append(a << 2 | b >> 4)
        } else if remainder == 3 {
            let a = table[Int(buffer[index])], b = table[Int(buffer[index + 1])], c = table[Int(buffer[index + 2])]
            if (a | b | c) & 0xC0 != 0 || c & 0x03 != 0 { return nil }
            out.append(a << 2 | b >> 4)
            out.append((b & 0x0F) << 4 | c >> 2)
        }
        return out
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
