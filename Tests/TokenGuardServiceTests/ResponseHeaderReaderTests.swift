import Testing
import TokenGuardService

/// The header reader against the lines an upstream could send, byte for byte (libcurl hands over each line with its
/// terminator).
struct ResponseHeaderReaderTests {
    static func read(_ lines: [String]) -> Result<[(String, String)], ResponseHeaderReader.Refusal> {
        var reader = ResponseHeaderReader()
        for line in lines {
            if case .failure(let refusal) = reader.read(line: Array(line.utf8)) { return .failure(refusal) }
        }
        return .success(reader.headers)
    }

    static func values(_ name: String, _ lines: [String]) -> [String]? {
        guard case .success(let headers) = read(lines) else { return nil }
        return headers.filter { $0.0 == name }.map(\.1)
    }

    static func refusal(_ lines: [String]) -> ResponseHeaderReader.Refusal? {
        guard case .failure(let refusal) = read(lines) else { return nil }
        return refusal
    }

    @Test("only SP and HTAB are trimmed: other whitespace stays in the value, for its parser to refuse")
    func trimming() {
        #expect(Self.values("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control: \t max-age=60 \t\r\n"]) == ["max-age=60"])
        #expect(Self.values("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control:\u{A0}max-age=60\r\n"]) == ["\u{A0}max-age=60"])
        #expect(Self.values("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control: max-age=60\u{2028}\r\n"]) == ["max-age=60\u{2028}"])
        #expect(Self.values("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control: \u{0B}\u{0C}no-store\r\n"]) == ["\u{0B}\u{0C}no-store"])
        #expect(Self.values("x-spaced", ["HTTP/1.1 200 OK\r\n", "X-Spaced \t: private\r\n"]) == ["private"])
        #expect(Self.values("x-lf-only", ["HTTP/1.1 200 OK\n", "X-LF-Only: yes\n"]) == ["yes"])
        #expect(Self.values("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control:\u{301}no-store\r\n"]) == ["\u{301}no-store"])
    }

    @Test("a line that is not a header, status, folded or empty line makes the reply malformed, never skipped (red team)")
    func malformedLines() {
        for line in [
            "Cache-Control\u{0B}: no-store\r\n", "Cache-Control\u{0C}: no-store\r\n", "Cache-Control\u{A0}: no-store\r\n",
            "\u{0B}Cache-Control: no-store\r\n", "Cache-Control no-store\r\n", "\r\r\n", "\rX: y\r\n", ": no-name\r\n", "Bad Name: x\r\n",
        ] {
            #expect(Self.refusal(["HTTP/1.1 200 OK\r\n", line, "Cache-Control: max-age=60\r\n"]) == .malformedLine, "\(line.debugDescription)")
        }
    }

    @Test("no block wipes another: an interim block's Cache-Control adds to the final one's (red team)")
    func blocksAccumulate() {
        for interim in ["HTTP/1.1 100 Continue", "HTTP/1.1 103 Early Hints", "HTTP/2 103", "HTTP/1.1 101"] {
            let lines = [interim + "\r\n", "Cache-Control: no-store\r\n", "\r\n", "HTTP/1.1 200 OK\r\n", "Cache-Control: max-age=90000\r\n", "\r\n"]
            #expect(Self.values("cache-control", lines) == ["no-store", "max-age=90000"], "\(interim)")
        }
    }

    @Test("after a final status line (or one not read as 1xx) another status line is malformed: a trailer posing as one (red team)")
    func noStatusAfterFinal() {
        // An odd status line once read as interim let a trailer's status-like line wipe a no-store; a trailer
        // `HTTP/…` line wiped the final block's Retry-After.
        for status in ["HTTP/ 1.1 100 Continue", "HTTP/1.1 1000", "HTTP/1.1  100", "HTTP/1.1 10x", "HTTP/1.1 200 OK", "HTTP/2 429", "HTTP/1.1 199x"] {
            let lines = [status + "\r\n", "Retry-After: 5\r\n", "Cache-Control: no-store\r\n", "\r\n", "HTTP/1.1 200 OK\r\n", "\r\n"]
            #expect(Self.refusal(lines) == .malformedLine, "\(status)")
        }
        let trailer = ["HTTP/1.1 429 Too Many\r\n", "Retry-After: 5\r\n", "\r\n", "HTTP/1.1 200\r\n"]
        #expect(Self.refusal(trailer) == .malformedLine)
        #expect(Self.values("retry-after", Array(trailer.dropLast()) + ["X-Trailer: t\r\n"]) == ["5"])
    }

    @Test("other headers come from the last block and its trailers: an interim block's Retry-After is dropped (red team)")
    func lastBlockOnly() {
        let lines = [
            "HTTP/1.1 100 Continue\r\n", "Retry-After: 1\r\n", "\r\n", "HTTP/1.1 403 Forbidden\r\n", "X-RateLimit-Reset: 1767225600\r\n", "\r\n",
            "X-Trailer: t\r\n",
        ]
        #expect(Self.values("retry-after", lines) == [])
        #expect(Self.values("x-ratelimit-reset", lines) == ["1767225600"])
        #expect(Self.values("x-trailer", lines) == ["t"])
    }

    @Test("folded lines continue the header just before them; after a status or empty line, and first, they continue nothing")
    func folding() {
        #expect(
            Self.values("x-folded", ["HTTP/1.1 200 OK\r\n", "X-Folded: max-age=90000,\r\n", " \tno-store \r\n"]) == ["max-age=90000, no-store"])
        #expect(Self.values("a", ["HTTP/1.1 200 OK\r\n", " folded: first\r\n", "A: b\r\n"]) == ["b"])
        #expect(
            Self.values("cache-control", ["HTTP/1.1 100 Continue\r\n", "Cache-Control: b\r\n", "\r\n", " c\r\n", "HTTP/1.1 200 OK\r\n", " d\r\n"])
                == ["b"])
    }

    @Test("header 201 is refused, not dropped")
    func limit() {
        let status = ["HTTP/1.1 200 OK\r\n"]
        let padding = (0..<ResponseHeaderReader.maximumHeaders).map { "X-\($0): x\r\n" }
        #expect(Self.refusal(status + padding) == nil)
        #expect(Self.refusal(status + padding + ["Cache-Control: no-store\r\n"]) == .tooManyHeaders)
    }
}
