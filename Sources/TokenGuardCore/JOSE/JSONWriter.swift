/// Serialises ``JSONValue`` to compact JSON bytes. Output is always valid UTF-8 JSON.
public enum JSONWriter {
    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out)
        return out
    }

    public static func string(_ value: JSONValue) -> String { String(decoding: bytes(value), as: UTF8.self) }

    /// A written JSON object with `"id"` as its first member (batch results), without parsing it again. `object` is
    /// JSON text of an object with at least one member, none of them named `id`.
    public static func withLeadingID(_ id: JSONValue, _ object: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(object.count + 16)
        out.append(contentsOf: #"{"id":"#.utf8)
        write(id, into: &out)
        out.append(UInt8(ascii: ","))
        out.append(contentsOf: object.dropFirst())  // its "{"
        return out
    }

    /// Compact JSON in printable ASCII only: every byte 0x20...0x7E. Characters outside it are written as `\u`
    /// escapes (surrogate pairs above U+FFFF), so the text can travel where a control byte or non-ASCII byte must
    /// never appear (an HTTP header value).
    public static func asciiBytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(value, into: &out, asciiOnly: true)
        return out
    }

    public static func write(_ value: JSONValue, into out: inout [UInt8], asciiOnly: Bool = false) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .integer(let i): writeInteger(i, into: &out)
        case .number(_, let literal?): out.append(contentsOf: literal.utf8)
        case .number(let d, nil):
            if d == d.rounded(), abs(d) < 9.007_199_254_740_992e15 {
                out.append(contentsOf: String(Int64(d)).utf8)
            } else {
                out.append(contentsOf: "\(d)".utf8)
            }
        case .string(let s): asciiOnly ? writeASCIIString(s, into: &out) : writeString(s, into: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, element) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out, asciiOnly: asciiOnly)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            for (index, member) in object.members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                asciiOnly ? writeASCIIString(member.name, into: &out) : writeString(member.name, into: &out)
                out.append(UInt8(ascii: ":"))
                write(member.value, into: &out, asciiOnly: asciiOnly)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// An integer's decimal digits, as `String(value)` writes them, without making the string.
    static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude as UInt64: Int64.min has no positive Int64.
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes on the stack: 20 digits at most
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    /// Runs of bytes that need no escape are copied whole; only `"`, `\\` and control bytes are written one by one.
    static func writeString(_ string: String, into out: inout [UInt8]) {
        if string.utf8.withContiguousStorageIfAvailable({ writeString(bytes: $0, into: &out) }) == nil {
            var text = string
            text.withUTF8 { writeString(bytes: $0, into: &out) }
        }
    }

    static func writeString(bytes buffer: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Plain ASCII is skipped eight bytes at a time; the loop below finds what stopped the run, if anything.
        var runStart = 0
        let skipped = JSONParser.Cursor.plainRunEnd(buffer, from: 0)
        for index in skipped..<buffer.count {
            let byte = buffer[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if runStart < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[runStart..<index])) }
            runStart = index + 1
            out.append(0x5C)
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            default:
                out.append(UInt8(ascii: "u"))
                out.append(UInt8(ascii: "0"))
                out.append(UInt8(ascii: "0"))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0xF)])
            }
        }
        if runStart < buffer.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[runStart...])) }
        out.append(UInt8(ascii: "\""))
    }

    /// A JSON string with everything outside printable ASCII escaped as `\uXXXX`.
    static func writeASCIIString(_ string: String, into out: inout [UInt8]) {
        func escape(_ unit: UInt16) {
            out.append(contentsOf: [0x5C, UInt8(ascii: "u")])
            for shift in stride(from: 12, through: 0, by: -4) { out.append(hexDigits[Int((unit >> UInt16(shift)) & 0xF)]) }
        }
        out.append(UInt8(ascii: "\""))
        for scalar in string.unicodeScalars {
            switch scalar.value {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x20..<0x7F: out.append(UInt8(scalar.value))
            default:
                for unit in String(scalar).utf16 { escape(unit) }
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
