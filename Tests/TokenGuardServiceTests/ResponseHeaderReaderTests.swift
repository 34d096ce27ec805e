import Testing
import TokenGuardService

/// The header reader against the lines an upstream could send, byte for byte (libcurl hands over each line with its
/// terminator).
struct ResponseHeaderReaderTests {
    static func read(_ lines: [String]) -> (headers: [(String, String)], accepted: Bool) {
        var reader = ResponseHeaderReader()
        for line in lines where !reader.read(line: Array(line.utf8)) { return (reader.headers, false) }
        return (reader.headers, true)
    }

    static func value(_ name: String, _ lines: [String]) -> [String] {
        read(lines).headers.filter { $0.0 == name }.map(\.1)
    }

    @Test("only SP and HTAB are trimmed: other whitespace stays in the value, for its parser to refuse")
    func trimming() {
        #expect(Self.value("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control: \t max-age=60 \t\r\n"]) == ["max-age=60"])
        #expect(Self.value("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control:\u{A0}max-age=60\r\n"]) == ["\u{A0}max-age=60"])
        #expect(Self.value("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control: max-age=60\u{2028}\r\n"]) == ["max-age=60\u{2028}"])
        #expect(Self.value("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control: \u{0B}\u{0C}no-store\r\n"]) == ["\u{0B}\u{0C}no-store"])
        #expect(Self.value("x-spaced", ["HTTP/1.1 200 OK\r\n", "X-Spaced \t: private\r\n"]) == ["private"])
        #expect(Self.value("x-lf-only", ["HTTP/1.1 200 OK\n", "X-LF-Only: yes\n"]) == ["yes"])
    }

    @Test("a combining mark after the colon does not hide the line")
    func combiningMark() {
        #expect(Self.value("cache-control", ["HTTP/1.1 200 OK\r\n", "Cache-Control:\u{301}no-store\r\n"]) == ["\u{301}no-store"])
    }

    @Test("only an empty line ends a block: a line starting with CR does not, so a later HTTP/ line resets nothing")
    func blockEnds() {
        let lines = ["HTTP/1.1 200 OK\r\n", "Cache-Control: no-store\r\n", "\rX: y\r\n", "HTTP/1.1 200 OK\r\n", "\r\r\n", "HTTP/1.1 200 OK\r\n"]
        #expect(Self.value("cache-control", lines) == ["no-store"])
        // After the final status's block, a trailer block's HTTP/ line resets nothing either.
        let trailers = ["HTTP/1.1 200 OK\r\n", "Cache-Control: no-store\r\n", "\r\n", "HTTP/1.1 200 OK\r\n", "X-Trailer: 1\r\n", "\r\n"]
        #expect(Self.value("cache-control", trailers) == ["no-store"])
    }

    @Test("interim 1xx blocks are dropped; the final block's headers are kept")
    func interim() {
        let lines = ["HTTP/1.1 100 Continue\r\n", "X-Interim: 1\r\n", "\r\n", "HTTP/1.1 200 OK\r\n", "Cache-Control: max-age=5\r\n", "\r\n"]
        #expect(Self.read(lines).headers.map(\.0) == ["cache-control"])
    }

    @Test("folded lines continue their header; a folded first line is ignored")
    func folding() {
        #expect(Self.value("x-folded", ["HTTP/1.1 200 OK\r\n", "X-Folded: max-age=90000,\r\n", " \tno-store \r\n"]) == ["max-age=90000, no-store"])
        #expect(Self.read(["HTTP/1.1 200 OK\r\n", " folded: first\r\n", "A: b\r\n"]).headers.map(\.0) == ["a"])
    }

    @Test("header 201 is refused, not dropped")
    func limit() {
        let status = ["HTTP/1.1 200 OK\r\n"]
        let padding = (0..<ResponseHeaderReader.maximumHeaders).map { "X-\($0): x\r\n" }
        #expect(Self.read(status + padding).accepted)
        #expect(!Self.read(status + padding + ["Cache-Control: no-store\r\n"]).accepted)
    }
}
