import TokenGuardCore

/// What a lenient scan reads from the first bytes of a batch line that is over the limit (contract: "Batch ids"), or
/// from a line that is not JSON: its `id`, when the member and its whole value lie within those bytes (and no second `id`
/// does), whether the line is a request whose token is what made it too long, and whether the bytes are one whole
/// object, so that no `id` can follow unseen.
struct LenientLineScan {
    var id: JSONValue = .null
    /// True when a top-level `token` string starts in the head and does not end there.
    var tokenRunsOver = false
    /// True when the bytes are one whole object, every member delimited and nothing after it: then every `id` member
    /// was seen (an over-long line's head never is whole).
    var isComplete = false

    /// Scans `bytes` (an over-long line's head, or a whole line the parser refused) without the parser: members are
    /// told apart by quotes, brackets and commas alone, and only the `id` value is parsed.
    init(bytes: [UInt8]) {
        var idSeen = 0
        var index = bytes.startIndex
        func skipBlanks() { while index < bytes.endIndex, [0x20, 0x09, 0x0D, 0x0A].contains(bytes[index]) { index += 1 } }
        /// The end (exclusive) of the string starting at `from` (a quote), or nil when it does not end in the head.
        func stringEnd(_ from: Int) -> Int? {
            var position = from + 1
            while position < bytes.endIndex {
                switch bytes[position] {
                case UInt8(ascii: "\\"): position += 2
                case UInt8(ascii: "\""): return position + 1
                default: position += 1
                }
            }
            return nil
        }
        /// The end of the JSON value starting at `from`, or nil when it does not end in the head.
        func valueEnd(_ from: Int) -> Int? {
            guard from < bytes.endIndex else { return nil }
            switch bytes[from] {
            case UInt8(ascii: "\""): return stringEnd(from)
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                // The closing bracket each open one needs, innermost last: a `]` cannot close a `{` (an `id` inside a
                // nested object must not pass for the line's own).
                var closers: [UInt8] = []
                var position = from
                while position < bytes.endIndex {
                    switch bytes[position] {
                    case UInt8(ascii: "\""):
                        guard let end = stringEnd(position) else { return nil }
                        position = end
                        continue
                    case UInt8(ascii: "{"): closers.append(UInt8(ascii: "}"))
                    case UInt8(ascii: "["): closers.append(UInt8(ascii: "]"))
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        guard closers.popLast() == bytes[position] else { return nil }
                        if closers.isEmpty { return position + 1 }
                    default: break
                    }
                    position += 1
                }
                return nil
            default:
                // A number or a literal, up to its delimiter. A quote, bracket, brace or backslash in it means the
                // members cannot be told apart from here (red team 52: `0[,"id":"x",…]` hid a nested id).
                var position = from
                while position < bytes.endIndex, ![UInt8(ascii: ","), UInt8(ascii: "}"), 0x20, 0x09, 0x0D, 0x0A].contains(bytes[position]) {
                    if [UInt8(ascii: "\""), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "{"), UInt8(ascii: "\\")].contains(bytes[position]) {
                        return nil
                    }
                    position += 1
                }
                return position < bytes.endIndex ? position : nil
            }
        }
        skipBlanks()
        guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "{") else { return }
        index += 1
        while true {
            skipBlanks()
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "\""), let nameEnd = stringEnd(index) else { return }
            // A name that does not decode might be `id` read another way (`"i\d"`): the scan stops, unsure.
            guard let name = (try? JSONParser.parse(Array(bytes[index..<nameEnd])))?.stringValue else { return }
            index = nameEnd
            skipBlanks()
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: ":") else { return }
            index += 1
            skipBlanks()
            guard let end = valueEnd(index) else {
                if name.sameBytes(as: "token"), index < bytes.endIndex, bytes[index] == UInt8(ascii: "\"") { tokenRunsOver = true }
                return
            }
            if name.sameBytes(as: "id") {
                // Two ids: neither is the line's (a parser would refuse the line), so none is echoed.
                idSeen += 1
                id = idSeen == 1 ? (try? JSONParser.parse(Array(bytes[index..<end]))) ?? .null : .null
            }
            index = end
            skipBlanks()
            if index < bytes.endIndex, bytes[index] == UInt8(ascii: "}") {
                index += 1
                skipBlanks()
                isComplete = index == bytes.endIndex
                return
            }
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: ",") else { return }
            index += 1
        }
    }
}
