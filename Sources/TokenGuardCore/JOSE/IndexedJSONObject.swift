/// A JSON object checked in one strict pass and indexed, its members located but not decoded.
///
/// A token's payload is read this way: the checks need a dozen members and the rest are only echoed, so building a
/// tree of every claim (a `String` per name and value) is work thrown away. The pass accepts exactly what
/// ``JSONParser`` accepts — it is made of the same cursor steps (nested objects and arrays go through the parser
/// itself), duplicate names are refused by their decoded bytes, and when it refuses, the parser is run to give the
/// same error — so reading a member here or in ``JSONParser/parseObject(_:)`` gives the same value.
public struct IndexedJSONObject: Sendable {
    /// Where one member is: its name between the quotes, and its value's bytes.
    /// Offsets are held in 32 bits (documents over 2 GiB are not indexed): a cached verdict keeps its index, and a
    /// member in 32 bytes rather than 64 halves what a dozen of them cost.
    struct Member {
        /// The name's length and first seven bytes in one word: a lookup compares this before any bytes.
        var fingerprint: UInt64 = 0
        private var offsets: (Int32, Int32, Int32, Int32, Int32)
        /// The value's bytes are what ``JSONParser/Cursor/writeCanonicalValue(into:)`` writes for it — a string without
        /// escapes (its bytes are its value), a literal, or an integer of at most 18 characters other than `-0` — as the
        /// scan found when it stepped over it.
        var valueIsPlain = false

        init(nameStart: Int, nameEnd: Int, escapedName: Int, valueStart: Int, valueEnd: Int) {
            offsets = (Int32(nameStart), Int32(nameEnd), Int32(escapedName), Int32(valueStart), Int32(valueEnd))
        }

        var nameStart: Int { Int(offsets.0) }
        var nameEnd: Int { Int(offsets.1) }
        /// Index into `escapedNames` when the name has escapes (its bytes are not its raw text); -1 otherwise.
        var escapedName: Int {
            get { Int(offsets.2) }
            set { offsets.2 = Int32(newValue) }
        }
        var valueStart: Int {
            get { Int(offsets.3) }
            set { offsets.3 = Int32(newValue) }
        }
        var valueEnd: Int {
            get { Int(offsets.4) }
            set { offsets.4 = Int32(newValue) }
        }
    }

    /// A name's length (top byte) and first seven bytes (decoded bytes, for a name with escapes).
    static func fingerprint(_ name: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var print = UInt64(truncatingIfNeeded: min(name.count, 255)) << 56
        for index in 0..<min(name.count, 7) { print |= UInt64(name[index]) << (8 * UInt64(index)) }
        return print
    }

    /// ``fingerprint(_:)`` of the name at `range` in `buffer`, with one load of its first eight bytes when the buffer
    /// has them (a member's name is always followed by at least `":0}`, so it nearly always does).
    @inline(__always)
    static func fingerprint(in buffer: UnsafeBufferPointer<UInt8>, range: Range<Int>) -> UInt64 {
        guard range.lowerBound &+ 8 <= buffer.count else { return fingerprint(UnsafeBufferPointer(rebasing: buffer[range])) }
        let word = UInt64(littleEndian: UnsafeRawBufferPointer(buffer).loadUnaligned(fromByteOffset: range.lowerBound, as: UInt64.self))
        let count = range.upperBound &- range.lowerBound
        let kept: UInt64 = (1 &<< UInt64(truncatingIfNeeded: min(count, 7) &* 8)) &- 1
        return UInt64(truncatingIfNeeded: min(count, 255)) &<< 56 | word & kept
    }

    /// The document as received (offsets below count from its start).
    let bytes: ArraySlice<UInt8>
    /// The object's own bytes, without the whitespace around it.
    let span: Range<Int>
    let members: [Member]
    /// Decoded names of the members whose names carry escapes (rare: `"i\u0073s"`).
    let escapedNames: [[UInt8]]
    /// True when the object's bytes are already what ``writeCanonical(into:)`` writes, so they are copied as they
    /// stand: nothing between the tokens, no escape in any name or string, every number a plain integer of at most 18
    /// characters other than `-0`, and no nested object or array (those go the member-by-member way). This is the usual
    /// token payload. Found by the scan as it steps over each value, so writing a verdict does not walk its values again.
    let isCanonical: Bool

    /// Checks `bytes` as one JSON object and indexes its members; throws the parser's own error otherwise.
    public init(_ bytes: [UInt8]) throws(JSONParser.Error) { try self.init(bytes[...]) }

    /// The same over a slice, kept without a copy (a token's payload within its decoded segments).
    public init(_ bytes: ArraySlice<UInt8>) throws(JSONParser.Error) {
        guard let scanned = Self.scan(bytes) else {
            _ = try JSONParser.parseObject(bytes)
            // The parser accepted what the scan refused: never expected, but the stricter answer wins.
            throw JSONParser.Error(message: "the object could not be indexed", offset: 0)
        }
        self = scanned
    }

    /// An object already in memory, written and indexed (verdicts built from an inspection API's answer).
    public init(_ object: JSONObject) {
        let bytes = JSONWriter.bytes(.object(object))[...]
        // JSONWriter writes valid JSON, so the scan cannot refuse it; an empty object is the safe fallback.
        self =
            Self.scan(bytes) ?? IndexedJSONObject(bytes: Array("{}".utf8)[...], span: 0..<2, members: [], escapedNames: [], isCanonical: true)
    }

    private init(bytes: ArraySlice<UInt8>, span: Range<Int>, members: [Member], escapedNames: [[UInt8]], isCanonical: Bool) {
        self.bytes = bytes
        self.span = span
        self.members = members
        self.escapedNames = escapedNames
        self.isCanonical = isCanonical
    }

    public var count: Int { members.count }

    /// The member whose name has exactly these bytes, decoded; nil when absent.
    public subscript(name: String) -> JSONValue? {
        guard let member = member(named: name) else { return nil }
        return value(of: member)
    }

    /// Runs `body` with the bytes of a member that is a string without escapes (its bytes are its value); nil when
    /// the member is absent, not a string, or has escapes (then read it with the subscript).
    public func withPlainString<R>(_ name: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        guard let member = member(named: name) else { return nil }
        return withPlainString(member, body)
    }

    func withPlainString<R>(_ member: Member, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        bytes.withUnsafeBufferPointer { buffer -> R? in
            guard member.valueIsPlain, buffer[member.valueStart] == UInt8(ascii: "\"") else { return nil }
            return body(UnsafeBufferPointer(rebasing: buffer[(member.valueStart + 1)..<(member.valueEnd - 1)]))
        }
    }

    /// The value of a member that is an integer of at most 18 characters (every NumericDate), read where it lies; nil
    /// when the member is absent or anything else (then read it with the subscript, which decides).
    public func plainInteger(_ name: String) -> Int64? {
        guard let member = member(named: name) else { return nil }
        return plainInteger(member)
    }

    func plainInteger(_ member: Member) -> Int64? {
        bytes.withUnsafeBufferPointer { buffer -> Int64? in
            var index = member.valueStart
            let end = member.valueEnd
            guard end - index >= 1, end - index <= 18 else { return nil }
            let negative = buffer[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            // The scan checked the grammar (no leading zeros); a lone "-" cannot pass it, but is refused here too.
            guard index < end else { return nil }
            var value: Int64 = 0
            while index < end {
                let digit = buffer[index] &- UInt8(ascii: "0")
                guard digit < 10 else { return nil }
                value = value &* 10 &+ Int64(digit)
                index += 1
            }
            return negative ? -value : value
        }
    }

    /// True when a member has exactly this name.
    public func contains(_ name: String) -> Bool { member(named: name) != nil }

    /// The whole object as a tree (for callers that want every member).
    public func materialized() -> JSONObject {
        // The bytes passed the scan, so the parser accepts them.
        (try? JSONParser.parseObject(bytes)) ?? JSONObject()
    }

    /// Writes the object as ``JSONWriter`` writes its tree — the same bytes — without building the tree.
    public func writeCanonical(into out: inout [UInt8]) {
        bytes.withUnsafeBufferPointer { buffer in
            if isCanonical {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[span]))
                return
            }
            var cursor = JSONParser.Cursor(bytes: buffer)
            cursor.position = span.lowerBound
            cursor.writeCanonicalValue(into: &out)
        }
    }

    private func member(named name: String) -> Member? {
        // A native string's bytes are read in place (no copy of the name, no reference count taken per lookup).
        if let found = name.utf8.withContiguousStorageIfAvailable({ member(named: $0) }) { return found }
        var name = name
        return name.withUTF8 { member(named: $0) }
    }

    private func member(named wanted: UnsafeBufferPointer<UInt8>) -> Member? {
        let fingerprint = Self.fingerprint(wanted)
        return bytes.withUnsafeBufferPointer { buffer in
            for member in members where member.fingerprint == fingerprint {
                if member.escapedName >= 0 {
                    if escapedNames[member.escapedName].elementsEqual(wanted) { return member }
                    continue
                }
                guard member.nameEnd - member.nameStart == wanted.count else { continue }
                let raw = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: buffer[member.nameStart..<member.nameEnd]))
                if ByteCompare.equal(raw, UnsafeRawBufferPointer(wanted)) { return member }
            }
            return nil
        }
    }

    /// Calls `body` with each member's name (its decoded bytes) and the member, in document order: a reader that wants
    /// several members visits each once instead of looking each one up.
    func forEachMember(_ body: (UnsafeBufferPointer<UInt8>, Member) -> Void) {
        bytes.withUnsafeBufferPointer { buffer in
            for member in members {
                if member.escapedName >= 0 {
                    escapedNames[member.escapedName].withUnsafeBufferPointer { body($0, member) }
                } else {
                    body(UnsafeBufferPointer(rebasing: buffer[member.nameStart..<member.nameEnd]), member)
                }
            }
        }
    }

    /// True when `name` has exactly the bytes of `literal`.
    static func name(_ name: UnsafeBufferPointer<UInt8>, is literal: StaticString) -> Bool {
        name.count == literal.utf8CodeUnitCount
            && ByteCompare.equal(UnsafeRawBufferPointer(name), UnsafeRawBufferPointer(start: literal.utf8Start, count: name.count))
    }

    func value(of member: Member) -> JSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            // A plain string (the common case) is its bytes, a literal its first byte (the scan checked the rest), and an
            // integer of at most 18 characters its digits; anything else is parsed again where it lies.
            let first = buffer[member.valueStart]
            switch first {
            case UInt8(ascii: "\""):
                if member.valueIsPlain {
                    return .string(
                        String(decoding: UnsafeBufferPointer(rebasing: buffer[(member.valueStart + 1)..<(member.valueEnd - 1)]), as: UTF8.self))
                }
            case UInt8(ascii: "t"): return .bool(true)
            case UInt8(ascii: "f"): return .bool(false)
            case UInt8(ascii: "n"): return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                if let integer = plainInteger(member) { return .integer(integer) }
            default: break
            }
            var cursor = JSONParser.Cursor(bytes: buffer)
            cursor.position = member.valueStart
            return try? cursor.parseValue(depth: 1)
        }
    }

    /// The strict pass: the same steps, in the same order, as ``JSONParser`` on a top-level object. nil: refused.
    /// Up to this many members, a duplicate name is looked for by comparing fingerprints (at most 496 word compares);
    /// beyond, by a set, so a hostile object stays linear. An Entra ID token has about twenty claims: below this, a
    /// set would cost an allocation per member.
    static let membersCheckedByScan = 32

    private static func scan(_ bytes: ArraySlice<UInt8>) -> IndexedJSONObject? {
        bytes.withUnsafeBufferPointer { buffer -> IndexedJSONObject? in
            // Every offset must fit a member's 32 bits (the tree parser takes such a document; tokens are 16 KiB at most).
            guard buffer.count < Int(Int32.max) else { return nil }
            var cursor = JSONParser.Cursor(bytes: buffer)
            var members: [Member] = []
            var escapedNames: [[UInt8]] = []
            // Small objects check duplicates by scanning; larger ones switch to a set so the check stays linear.
            var seen: Set<ByteKey>? = nil
            var fingerprintBits: UInt64 = 0
            // Whether the bytes are their canonical writing (see ``isCanonical``): every value written as it stands, no
            // name with escapes, and nothing between tokens: each name's opening quote right after `{` or `,`, its value
            // right after its colon, right after its closing quote, and `}` right after the last value.
            var canonical = true
            do throws(JSONParser.Error) {
                cursor.skipWhitespace()
                let start = cursor.position
                guard start < buffer.count, buffer[start] == UInt8(ascii: "{") else { return nil }
                var expectedQuote = start + 1
                cursor.position += 1
                cursor.skipWhitespace()
                if cursor.position < buffer.count, buffer[cursor.position] == UInt8(ascii: "}") {
                    cursor.position += 1
                } else {
                    // About one member per 16 bytes (a header has three or four, a payload a dozen or more), at most 24:
                    // room for an Entra ID token's claims in a block malloc keeps in its per-thread cache (up to 1 KiB).
                    members.reserveCapacity(min(24, buffer.count / 16 + 1))
                    while true {
                        cursor.skipWhitespace()
                        guard cursor.position < buffer.count, buffer[cursor.position] == UInt8(ascii: "\"") else { return nil }
                        let (nameRange, decoded) = try cursor.scanString()
                        var member = Member(
                            nameStart: nameRange.lowerBound, nameEnd: nameRange.upperBound, escapedName: -1, valueStart: 0, valueEnd: 0)
                        if let decoded {
                            member.escapedName = escapedNames.count
                            escapedNames.append(decoded)
                            member.fingerprint = decoded.withUnsafeBufferPointer { Self.fingerprint($0) }
                        } else {
                            member.fingerprint = Self.fingerprint(in: buffer, range: nameRange)
                        }
                        if seen == nil && members.count >= Self.membersCheckedByScan {
                            seen = Set(members.map { ByteKey(bytes: name(of: $0, in: buffer, escapedNames: escapedNames)) })
                        }
                        // One bit per fingerprint, of 64: a name whose bit no earlier name set is new without a search.
                        let fingerprintBit = Self.bit(of: member.fingerprint)
                        if seen != nil {
                            let key = ByteKey(bytes: decoded ?? Array(buffer[nameRange]))
                            guard seen?.insert(key).inserted == true else { return nil }
                        } else if fingerprintBits & fingerprintBit != 0,
                            hasMember(
                                named: nameRange, decoded: decoded, fingerprint: member.fingerprint, among: members, escapedNames: escapedNames,
                                in: buffer)
                        {
                            return nil
                        }
                        fingerprintBits |= fingerprintBit
                        cursor.skipWhitespace()
                        guard cursor.position < buffer.count, buffer[cursor.position] == UInt8(ascii: ":") else { return nil }
                        cursor.position += 1
                        cursor.skipWhitespace()
                        let valueStart = cursor.position
                        let valueIsPlain = try cursor.skipValue(depth: 1)
                        let valueEnd = cursor.position
                        if !valueIsPlain || decoded != nil || nameRange.lowerBound != expectedQuote &+ 1 || valueStart != nameRange.upperBound &+ 2 {
                            canonical = false
                        }
                        expectedQuote = valueEnd &+ 1
                        member.valueStart = valueStart
                        member.valueEnd = valueEnd
                        member.valueIsPlain = valueIsPlain
                        members.append(member)
                        cursor.skipWhitespace()
                        guard cursor.position < buffer.count else { return nil }
                        if buffer[cursor.position] == UInt8(ascii: ",") {
                            cursor.position += 1
                            continue
                        }
                        guard buffer[cursor.position] == UInt8(ascii: "}") else { return nil }
                        cursor.position += 1
                        break
                    }
                }
                let end = cursor.position
                canonical = canonical && expectedQuote == end - (members.isEmpty ? 1 : 0)
                cursor.skipWhitespace()
                guard cursor.position == buffer.count else { return nil }
                return IndexedJSONObject(
                    bytes: bytes, span: start..<end, members: members, escapedNames: escapedNames, isCanonical: canonical)
            } catch {
                return nil
            }
        }
    }

    /// A fingerprint's bit among 64 for the scan's duplicate check: the top six bits of a multiplicative hash, so names
    /// that share a first byte (`nbf`, `nonce`) still spread. Equal fingerprints always have the same bit.
    static func bit(of fingerprint: UInt64) -> UInt64 { 1 &<< ((fingerprint &* 0x9E37_79B9_7F4A_7C15) &>> 58) }

    /// A member's name as bytes (decoded when it has escapes).
    private static func name(of member: Member, in buffer: UnsafeBufferPointer<UInt8>, escapedNames: [[UInt8]]) -> [UInt8] {
        member.escapedName >= 0 ? escapedNames[member.escapedName] : Array(buffer[member.nameStart..<member.nameEnd])
    }

    /// Whether one of `members` has the name at `range` (or `decoded`, when that name has escapes), by bytes. A static
    /// function of its arguments: a closure over the scan's state would box it and retain it on every comparison.
    /// Names with different fingerprints (made from the decoded bytes either way) differ, so only equal ones are compared.
    private static func hasMember(
        named range: Range<Int>, decoded: [UInt8]?, fingerprint: UInt64, among members: [Member], escapedNames: [[UInt8]],
        in buffer: UnsafeBufferPointer<UInt8>
    ) -> Bool {
        let raw = UnsafeRawBufferPointer(buffer)
        for member in members where member.fingerprint == fingerprint {
            if member.escapedName < 0, decoded == nil {
                guard member.nameEnd - member.nameStart == range.count else { continue }
                let left = UnsafeRawBufferPointer(rebasing: raw[member.nameStart..<member.nameEnd])
                if ByteCompare.equal(left, UnsafeRawBufferPointer(rebasing: raw[range])) { return true }
                continue
            }
            // Escapes on either side (rare): compare the decoded bytes.
            if name(of: member, in: buffer, escapedNames: escapedNames) == (decoded ?? Array(buffer[range])) { return true }
        }
        return false
    }
}

extension JSONParser.Cursor {
    /// Steps over one string, checking it as ``parseString()`` does. Returns the bytes between the quotes and, when
    /// the string has escapes, its decoded bytes (its raw text is then not its value).
    mutating func scanString() throws(JSONParser.Error) -> (Range<Int>, decoded: [UInt8]?) {
        let quote = position
        position += 1
        let start = position
        position = Self.plainRunEnd(bytes, from: position)
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                position += 1
                return (start..<(position - 1), nil)
            }
            // Non-ASCII (UTF-8 to validate) or an escape: the parser's own string reader decides.
            if byte == UInt8(ascii: "\\") || byte >= 0x80 { break }
            if byte < 0x20 { throw error("control character in string") }
            position += 1
        }
        position = quote
        var decoded = try parseString()
        let range = (quote + 1)..<(position - 1)
        // Every escape is longer than what it stands for, so the decoded text is shorter exactly when it had escapes.
        return decoded.utf8.count == range.count ? (range, nil) : (range, decoded.withUTF8 { Array($0) })
    }

    /// Steps over one value, checking it as ``parseValue(depth:)`` does; containers are parsed by it. True when the
    /// value's bytes are what ``writeCanonicalValue(into:)`` writes for it: a string without escapes, a literal, or a
    /// plain integer of at most 18 characters other than `-0`.
    @discardableResult
    mutating func skipValue(depth: Int) throws(JSONParser.Error) -> Bool {
        guard position < bytes.count else { throw error("unexpected end of input") }
        let start = position
        switch bytes[position] {
        case UInt8(ascii: "\""):
            return try scanString().decoded == nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            // `-0` is the one short integer the tree writes otherwise (as `0`).
            return try skipNumber() && !(position - start == 2 && bytes[start] == UInt8(ascii: "-") && bytes[start + 1] == UInt8(ascii: "0"))
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return true
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return true
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return true
        default:
            _ = try parseValue(depth: depth)
            return false
        }
    }

    /// Writes the value at the cursor as ``JSONWriter`` writes the parsed value (the cursor is on checked bytes).
    mutating func writeCanonicalValue(into out: inout [UInt8]) {
        skipWhitespace()
        guard position < bytes.count else { return }
        switch bytes[position] {
        case UInt8(ascii: "{"):
            writeCanonicalContainer(close: UInt8(ascii: "}"), into: &out) { cursor, out in
                cursor.writeCanonicalString(into: &out)
                cursor.skipWhitespace()
                cursor.position += 1  // :
                out.append(UInt8(ascii: ":"))
                cursor.writeCanonicalValue(into: &out)
            }
        case UInt8(ascii: "["):
            writeCanonicalContainer(close: UInt8(ascii: "]"), into: &out) { cursor, out in cursor.writeCanonicalValue(into: &out) }
        case UInt8(ascii: "\""):
            writeCanonicalString(into: &out)
        case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
            let count = bytes[position] == UInt8(ascii: "f") ? 5 : 4
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[position..<min(position + count, bytes.count)]))
            position += count
        default:
            // A plain integer of at most 18 characters is an Int64 written as it stands (no leading zeros in valid
            // JSON), except `-0`, which the tree writes `0`.
            let start = position
            var end = start
            if end < bytes.count, bytes[end] == UInt8(ascii: "-") { end += 1 }
            while end < bytes.count, bytes[end] >= UInt8(ascii: "0"), bytes[end] <= UInt8(ascii: "9") { end += 1 }
            let plain = end - start <= 18 && (end >= bytes.count || !Self.continuesNumber(bytes[end]))
            let negativeZero = end - start == 2 && bytes[start] == UInt8(ascii: "-") && bytes[start + 1] == UInt8(ascii: "0")
            if plain && !negativeZero && end > start {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<end]))
                position = end
                return
            }
            // Other numbers: parsed and written as the tree would be (`-0` as `0`; a number that is not an Int64 as
            // it was written).
            guard let value = try? parseValue(depth: 1) else {
                position = start + 1
                return
            }
            JSONWriter.write(value, into: &out)
        }
    }

    /// An object or array at the cursor: its opening byte, each element written by `element` with commas between
    /// (whitespace dropped), then `close`.
    private mutating func writeCanonicalContainer(
        close: UInt8, into out: inout [UInt8], _ element: (inout JSONParser.Cursor, inout [UInt8]) -> Void
    ) {
        out.append(bytes[position])
        position += 1
        var first = true
        while true {
            skipWhitespace()
            guard position < bytes.count else { return }
            if bytes[position] == close {
                position += 1
                break
            }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                continue
            }
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            element(&self, &out)
        }
        out.append(close)
    }

    /// Whether `byte` continues a number past its integer digits (a fraction or an exponent).
    private static func continuesNumber(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E")
    }

    /// A string without escapes is written as it stands (JSONWriter would escape nothing in it); one with escapes
    /// is decoded and written by JSONWriter.
    private mutating func writeCanonicalString(into out: inout [UInt8]) {
        let quote = position
        // Non-ASCII bytes are copied as they are too: the run end below only stops early, never late.
        var index = Self.plainRunEnd(bytes, from: position + 1)
        while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") { index += 1 }
        if index < bytes.count, bytes[index] == UInt8(ascii: "\"") {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[quote...index]))
            position = index + 1
            return
        }
        guard let text = try? parseString() else {
            position = quote + 1
            return
        }
        JSONWriter.writeString(text, into: &out)
    }
}
