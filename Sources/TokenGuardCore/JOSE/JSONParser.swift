/// A strict RFC 8259 JSON parser over bytes.
///
/// Strict where lenient parsers are dangerous: duplicate member names are an error (two parsers reading the
/// same token differently is a classic JWT bypass), nesting depth is bounded, UTF-8 must be valid, lone
/// surrogates are refused, and nothing but whitespace may follow the value. No Foundation, no `Any`.
public struct JSONParser {
    public struct Error: Swift.Error, Sendable, Equatable, CustomStringConvertible {
        public let message: String
        public let offset: Int
        public var description: String { "\(message) at byte \(offset)" }
    }

    /// Nesting deeper than this is refused (jwt-kit uses 32 for the same reason: bounded recursion).
    public static let maximumDepth = 32

    /// Parses one JSON document.
    public static func parse(_ bytes: some Collection<UInt8>) throws(Error) -> JSONValue {
        // Read in place when the bytes are contiguous (a server's receive buffer): a batch body is not copied first.
        let parsed = bytes.withContiguousStorageIfAvailable { buffer in Result { () throws(Error) in try parse(buffer) } }
        return try (parsed ?? Array(bytes).withUnsafeBufferPointer { buffer in Result { () throws(Error) in try parse(buffer) } }).get()
    }

    static func parse(_ buffer: UnsafeBufferPointer<UInt8>) throws(Error) -> JSONValue {
        var parser = Cursor(bytes: buffer)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.position == buffer.count else { throw parser.error("trailing data after the JSON value") }
        return value
    }

    /// Parses a document that must be a JSON object.
    public static func parseObject(_ bytes: some Collection<UInt8>) throws(Error) -> JSONObject {
        guard case .object(let object) = try parse(bytes) else { throw Error(message: "expected a JSON object", offset: 0) }
        return object
    }

    struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var position = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        func error(_ message: String) -> Error { Error(message: message, offset: position) }

        mutating func skipWhitespace() {
            while position < bytes.count {
                switch bytes[position] {
                case 0x20, 0x09, 0x0A, 0x0D: position += 1
                default: return
                }
            }
        }

        mutating func parseValue(depth: Int) throws(Error) -> JSONValue {
            guard position < bytes.count else { throw error("unexpected end of input") }
            switch bytes[position] {
            case UInt8(ascii: "{"): return .object(try parseObject(depth: depth + 1))
            case UInt8(ascii: "["): return .array(try parseArray(depth: depth + 1))
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "t"):
                try expectLiteral("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try expectLiteral("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try expectLiteral("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
            default: throw error("unexpected character")
            }
        }

        mutating func expectLiteral(_ literal: StaticString) throws(Error) {
            let count = literal.utf8CodeUnitCount
            guard position + count <= bytes.count else { throw error("unexpected end of input") }
            let expected = UnsafeRawBufferPointer(start: literal.utf8Start, count: count)
            guard ByteCompare.equal(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[position..<(position + count)]), expected)
            else { throw error("invalid literal") }
            position += count
        }

        mutating func parseObject(depth: Int) throws(Error) -> JSONObject {
            guard depth <= JSONParser.maximumDepth else { throw error("nesting too deep") }
            position += 1  // {
            var object = JSONObject()
            // Small objects check duplicates by scanning; larger ones switch to a set so the check stays linear.
            var seen: Set<ByteKey>? = nil
            skipWhitespace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
                position += 1
                return object
            }
            object.reserveCapacity(16)  // claims and headers: a JWT payload has about a dozen members
            while true {
                skipWhitespace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw error("expected a member name") }
                let namePosition = position
                let name = try parseString()
                if seen == nil && object.count >= 16 { seen = Set(object.names.map(ByteKey.init)) }
                let duplicate = seen.map { $0.contains(ByteKey(name)) } ?? (object[name] != nil)
                if duplicate { throw Error(message: "duplicate member name", offset: namePosition) }
                seen?.insert(ByteKey(name))
                skipWhitespace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw error("expected ':'") }
                position += 1
                skipWhitespace()
                let value = try parseValue(depth: depth)
                object.appendUnchecked(name, value)
                skipWhitespace()
                guard position < bytes.count else { throw error("unexpected end of input") }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                if bytes[position] == UInt8(ascii: "}") {
                    position += 1
                    return object
                }
                throw error("expected ',' or '}'")
            }
        }

        mutating func parseArray(depth: Int) throws(Error) -> [JSONValue] {
            guard depth <= JSONParser.maximumDepth else { throw error("nesting too deep") }
            position += 1  // [
            var array: [JSONValue] = []
            skipWhitespace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
                position += 1
                return array
            }
            while true {
                skipWhitespace()
                array.append(try parseValue(depth: depth))
                skipWhitespace()
                guard position < bytes.count else { throw error("unexpected end of input") }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                if bytes[position] == UInt8(ascii: "]") {
                    position += 1
                    return array
                }
                throw error("expected ',' or ']'")
            }
        }

        mutating func parseString() throws(Error) -> String {
            position += 1  // opening quote
            let start = position
            var asciiOnly = true
            // Words of plain ASCII (a token is a kilobyte of it) are skipped whole; the byte loop decides the rest.
            position = Self.plainRunEndOfLongRun(bytes, from: position)
            // Fast path: no escapes. Scan to the closing quote.
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    let slice = UnsafeBufferPointer(rebasing: bytes[start..<position])
                    position += 1
                    if asciiOnly { return String(decoding: slice, as: UTF8.self) }
                    guard let string = String(validating: slice, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                    return string
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw error("control character in string") }
                if byte >= 0x80 { asciiOnly = false }
                position += 1
            }
            guard position < bytes.count else { throw error("unterminated string") }
            // Slow path: escapes present. Decode into a byte buffer, then validate UTF-8 once.
            var out = Array(UnsafeBufferPointer(rebasing: bytes[start..<position]))
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    position += 1
                    guard let string = String(validating: out, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                    return string
                }
                if byte < 0x20 { throw error("control character in string") }
                if byte != UInt8(ascii: "\\") {
                    out.append(byte)
                    position += 1
                    continue
                }
                position += 1
                guard position < bytes.count else { throw error("unterminated escape") }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard position + 2 <= bytes.count, bytes[position] == UInt8(ascii: "\\"),
                            bytes[position + 1] == UInt8(ascii: "u")
                        else { throw error("lone high surrogate") }
                        position += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid low surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("lone low surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw error("invalid unicode escape") }
                    out.append(contentsOf: UTF8.encode(unicode).map { Array($0) } ?? [])
                default:
                    throw error("invalid escape")
                }
            }
            throw error("unterminated string")
        }

        /// Where the run of plain string bytes starting at `start` may end, eight bytes at a time: at the first quote,
        /// backslash, control byte or non-ASCII byte in the first word holding one (on a big-endian machine, at that
        /// word's start); the byte loop after it decides from there.
        static func plainRunEnd(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
            let raw = UnsafeRawBufferPointer(bytes)
            var offset = start
            while offset + 8 <= raw.count {
                let flags = specialFlags(raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                if flags != 0 {
                    // Each test flags its first qualifying byte exactly (a borrow runs only upwards, from a flagged byte),
                    // so the lowest flag of all is the first special byte.
                    #if _endian(little)
                        offset += flags.trailingZeroBitCount >> 3
                    #endif
                    break
                }
                offset += 8
            }
            return offset
        }

        /// ``plainRunEnd(_:from:)`` for strings that may be long (a request's token is a kilobyte of plain bytes): a run
        /// still plain after four words is stepped over 32 bytes at a time, four independent words per step, until a
        /// step holds a special byte, which the word loop then finds. Same answer; the claims scan, whose strings are
        /// short, keeps the plain word loop.
        static func plainRunEndOfLongRun(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
            // The first four words as the word loop reads them: most strings end there.
            let firstWords = UnsafeBufferPointer(rebasing: bytes[..<min(bytes.count, start + 32)])
            var offset = plainRunEnd(firstWords, from: start)
            guard offset == start + 32 else { return offset }
            let raw = UnsafeRawBufferPointer(bytes)
            while offset + 32 <= raw.count {
                let step =
                    specialFlags(raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                    | specialFlags(raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
                    | specialFlags(raw.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self))
                    | specialFlags(raw.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self))
                if step != 0 { break }
                offset += 32
            }
            return plainRunEnd(bytes, from: offset)
        }

        /// The high bit of each byte of `word` that is a quote, backslash, control or non-ASCII byte, at least for the
        /// first such byte (zero-byte and below-n tests, exact as to whether any byte qualifies; n = 0x20 ≤ 0x80).
        @inline(__always)
        static func specialFlags(_ word: UInt64) -> UInt64 {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let quote = word ^ (0x22 &* ones)
            let backslash = word ^ (0x5C &* ones)
            let special = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- 0x20 &* ones) & ~word) | word
            return special & 0x8080_8080_8080_8080
        }

        mutating func parseHex4() throws(Error) -> UInt32 {
            guard position + 4 <= bytes.count else { throw error("truncated unicode escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw error("invalid hex digit in unicode escape")
                }
                value = value << 4 | digit
                position += 1
            }
            return value
        }

        mutating func parseNumber() throws(Error) -> JSONValue {
            let start = position
            let isInteger = try scanNumber()
            return try numberValue(from: start, isInteger: isInteger)
        }

        /// Steps over a number, checking it as ``parseNumber()`` does; an integer of at most 18 characters (every
        /// NumericDate) cannot be out of range, so it is not converted.
        /// True when the number is an integer of at most 18 characters (an Int64 read without a check).
        @discardableResult
        mutating func skipNumber() throws(Error) -> Bool {
            let start = position
            let isInteger = try scanNumber()
            if isInteger && position - start <= 18 { return true }
            _ = try numberValue(from: start, isInteger: isInteger)
            return false
        }

        /// Steps over the number's grammar (RFC 8259 §6); true when it has no fraction and no exponent.
        private mutating func scanNumber() throws(Error) -> Bool {
            if bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard position < bytes.count else { throw error("truncated number") }
            if bytes[position] == UInt8(ascii: "0") {
                position += 1
            } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[position]) {
                while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
            } else {
                throw error("invalid number")
            }
            var isInteger = true
            if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
                isInteger = false
                position += 1
                let digitsStart = position
                while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
                guard position > digitsStart else { throw error("invalid fraction") }
            }
            if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
                isInteger = false
                position += 1
                if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                    position += 1
                }
                let digitsStart = position
                while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
                guard position > digitsStart else { throw error("invalid exponent") }
            }
            return isInteger
        }

        /// The value of the number between `start` and the cursor.
        private func numberValue(from start: Int, isInteger: Bool) throws(Error) -> JSONValue {
            if isInteger && position - start <= 18 {
                // At most 18 characters: the digits fit an Int64 without a check (NumericDates and other claims).
                var value: Int64 = 0
                let negative = bytes[start] == UInt8(ascii: "-")
                for index in (negative ? start + 1 : start)..<position { value = value &* 10 &+ Int64(bytes[index] &- UInt8(ascii: "0")) }
                return .integer(negative ? -value : value)
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
            if isInteger, let integer = Int64(text) { return .integer(integer) }
            guard let double = Double(text), double.isFinite else { throw Error(message: "number out of range", offset: start) }
            return .number(double, literal: text)
        }
    }
}
