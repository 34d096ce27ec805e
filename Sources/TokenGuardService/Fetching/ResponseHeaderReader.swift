import TokenGuardCore

/// A response's header lines, read as bytes, one line at a time (as libcurl hands them over, terminator included).
///
/// - Only an empty line (CRLF or LF) ends a header block; a status line (`HTTP/`) at a block's start, while no final
///   status has been seen, starts the headers afresh (an interim 1xx response's block comes first). A header line
///   named `HTTP/x` or a trailer block cannot wipe the headers read before it.
/// - A line starting with a space or tab continues the previous header (obsolete line folding, read as one space:
///   RFC 9112 §5.2); a folded line with no header before it is ignored.
/// - The name is the bytes before the first colon and the value those after it, each without the spaces and tabs
///   around it (RFC 9110 §5.6.3: only SP and HTAB are whitespace here). Other bytes are kept as they are, so a value
///   with a control or non-ASCII byte reaches its parser (Cache-Control reads it as invalid: the minimum TTL) instead
///   of being trimmed to something that looks valid.
package struct ResponseHeaderReader {
    package private(set) var headers: [(String, String)] = []
    private var awaitingFinalStatus = true
    private var atBlockStart = true
    package static let maximumHeaders = 200

    package init() {}

    /// False when the line would be header number ``maximumHeaders`` + 1: the transfer is aborted rather than read
    /// with some left out (a dropped `Cache-Control: no-store` would mean the longest TTL).
    package mutating func read(line raw: some Collection<UInt8>) -> Bool {
        var line = Array(raw)[...]
        if line.last == 0x0A { line = line.dropLast() }
        if line.last == 0x0D { line = line.dropLast() }
        let startsBlock = atBlockStart
        atBlockStart = line.isEmpty
        if line.isEmpty { return true }
        if startsBlock && awaitingFinalStatus && line.starts(with: "HTTP/".utf8) {
            headers.removeAll()
            // The status code is the word after the first space; 1xx is interim and another block follows.
            let afterVersion = line.drop { $0 != 0x20 }.drop { $0 == 0x20 }
            awaitingFinalStatus = afterVersion.first == UInt8(ascii: "1")
            return true
        }
        if let first = line.first, Self.isBlank(first) {
            guard let last = headers.indices.last else { return true }
            headers[last].1 += " " + Self.text(Self.trimmed(line))
            return true
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return true }
        guard headers.count < Self.maximumHeaders else { return false }
        let name = ASCII.lowercased(Self.text(Self.trimmed(line[..<colon])))
        headers.append((name, Self.text(Self.trimmed(line[line.index(after: colon)...]))))
        return true
    }

    private static func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var bytes = bytes
        while let first = bytes.first, isBlank(first) { bytes = bytes.dropFirst() }
        while let last = bytes.last, isBlank(last) { bytes = bytes.dropLast() }
        return bytes
    }

    private static func text(_ bytes: ArraySlice<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }
}
