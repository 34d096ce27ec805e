import TokenGuardCore

/// A response's header lines, read as bytes, one line at a time (as libcurl hands them over, terminator included).
///
/// - A status line (`HTTP/…`) starts a new block (an interim 1xx response's comes first), and the headers of the
///   blocks before it are dropped — all but their Cache-Control lines, which are kept from every block (interim,
///   final, trailers). Deciding which block is final would mean agreeing with libcurl on every odd status line and
///   block end, and each disagreement let a later block wipe a `no-store` (red team: `HTTP/ 1.1 200`, a block ended by
///   `\r\r\n`); kept from every block, Cache-Control lines only add restrictions (they are combined, and of several the
///   most restrictive wins). Other headers (Retry-After, a rate limit's reset) come from the last block and its
///   trailers, as an interim block's must not set them (red team: `Retry-After: 1` in a `100` before a rate limit's
///   `403` had clients retry every second).
/// - Only a `1xx` status line is interim. After any other (one that cannot be read as `HTTP/<version> 1xx` included),
///   another status line can only be a trailer posing as one (tokenguard follows no redirects and hides a proxy's
///   CONNECT reply), so the reply is malformed (red team: a trailer `HTTP/…` line wiped the final block's Retry-After).
/// - Status and empty lines are not headers. A line starting with a space or tab continues the header
///   just before it (obsolete line folding, read as one space: RFC 9112 §5.2), and nothing if no header is just
///   before it.
/// - Every other line must be `name: value` with an RFC 9110 token as its name (without the spaces and tabs around
///   it): a line that is not (a stray control byte or NBSP in a name, no colon, a bare CR) makes the reply malformed,
///   never skipped (`Cache-Control\u{0B}: no-store` skipped meant the longest TTL). Values keep every byte but the
///   spaces and tabs around them, so a control or non-ASCII byte reaches the value's parser (Cache-Control reads it
///   as invalid: the minimum TTL) instead of being trimmed to something that looks valid.
package struct ResponseHeaderReader {
    package enum Refusal: Error, Equatable {
        /// More than ``ResponseHeaderReader/maximumHeaders`` header lines (the reply is not read with some left out).
        case tooManyHeaders
        /// A line that is neither a header, a status line, a folded continuation nor empty.
        case malformedLine
    }

    package private(set) var headers: [(String, String)] = []
    /// A folded line may continue the last header only while no status or empty line came after it.
    private var lastHeaderOpen = false
    /// A status line other than an interim `1xx` was read: no other may follow.
    private var finalStatusRead = false
    package static let maximumHeaders = 200

    package init() {}

    package mutating func read(line raw: some Collection<UInt8>) -> Result<Void, Refusal> {
        var line = Array(raw)[...]
        if line.last == 0x0A { line = line.dropLast() }
        if line.last == 0x0D { line = line.dropLast() }
        if line.starts(with: "HTTP/".utf8) {
            guard !finalStatusRead else { return .failure(.malformedLine) }
            finalStatusRead = !Self.isInterimStatus(line)
            headers.removeAll { $0.0 != "cache-control" }
            lastHeaderOpen = false
            return .success(())
        }
        if line.isEmpty {
            lastHeaderOpen = false
            return .success(())
        }
        if let first = line.first, Self.isBlank(first) {
            if lastHeaderOpen, let last = headers.indices.last { headers[last].1 += " " + Self.text(Self.trimmed(line)) }
            return .success(())
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return .failure(.malformedLine) }
        let name = Self.trimmed(line[..<colon])
        guard !name.isEmpty, name.allSatisfy(HTTPToken.isTokenCharacter) else { return .failure(.malformedLine) }
        guard headers.count < Self.maximumHeaders else { return .failure(.tooManyHeaders) }
        headers.append((ASCII.lowercased(Self.text(name)), Self.text(Self.trimmed(line[line.index(after: colon)...]))))
        lastHeaderOpen = true
        return .success(())
    }

    /// `HTTP/<version> 1xx`: a version without blanks, one space, then a three-digit code starting with 1.
    private static func isInterimStatus(_ line: ArraySlice<UInt8>) -> Bool {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return false }
        let code = line[line.index(after: space)...].prefix(4)
        guard code.count >= 3, code.first == UInt8(ascii: "1"), code.prefix(3).allSatisfy({ (48...57).contains($0) }) else { return false }
        return code.count == 3 || code.last == UInt8(ascii: " ")
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
