import TokenGuardCore

/// What can be read from the first bytes of a batch line that is over the limit (contract: "Batch ids"), or of one
/// that is not JSON: its `id`, when the member (only one) and its whole value lie within those bytes, and whether the
/// line is a request whose token is what made it too long.
struct OverlongLine {
    var id: JSONValue = .null
    /// True when a top-level `token` string starts in the head and does not end there.
    var tokenRunsOver = false

    init(head: [UInt8]) {
        let bytes = head
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
                var depth = 0
                var position = from
                while position < bytes.endIndex {
                    switch bytes[position] {
                    case UInt8(ascii: "\""):
                        guard let end = stringEnd(position) else { return nil }
                        position = end
                        continue
                    case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        depth -= 1
                        if depth == 0 { return position + 1 }
                    default: break
                    }
                    position += 1
                }
                return nil
            default:
                var position = from
                while position < bytes.endIndex, ![UInt8(ascii: ","), UInt8(ascii: "}"), 0x20, 0x09, 0x0D, 0x0A].contains(bytes[position]) {
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
            let name = (try? JSONParser.parse(Array(bytes[index..<nameEnd])))?.stringValue
            index = nameEnd
            skipBlanks()
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: ":") else { return }
            index += 1
            skipBlanks()
            guard let end = valueEnd(index) else {
                if name?.sameBytes(as: "token") == true, index < bytes.endIndex, bytes[index] == UInt8(ascii: "\"") { tokenRunsOver = true }
                return
            }
            if name?.sameBytes(as: "id") == true {
                // Two ids: neither is the line's (a parser would refuse the line), so none is echoed.
                idSeen += 1
                id = idSeen == 1 ? (try? JSONParser.parse(Array(bytes[index..<end]))) ?? .null : .null
            }
            index = end
            skipBlanks()
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: ",") else { return }
            index += 1
        }
    }
}
