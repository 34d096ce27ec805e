import Testing
import TokenGuardCore

struct JSONParserTests {
    func parse(_ text: String) -> JSONValue? { try? JSONParser.parse(Array(text.utf8)) }

    @Test(
        "valid documents",
        arguments: [
            ("{}", JSONValue.object(JSONObject())),
            ("[]", .array([])),
            (
                " {\"a\" : [1, -2, 3.5, 1e2, true, false, null, \"x\"]} ",
                .object(
                    JSONObject([
                        ("a", .array([.integer(1), .integer(-2), .number(3.5), .number(100), .bool(true), .bool(false), .null, .string("x")]))
                    ]))
            ),
            ("\"\\u0040\\/\\n\\ud83d\\ude00\"", .string("@/\n😀")),
            ("\"Алина\"", .string("Алина")),
            ("9223372036854775807", .integer(Int64.max)),
            ("9223372036854775808", .number(9_223_372_036_854_775_808)),
            ("-0", .integer(0)),
        ])
    func valid(text: String, expected: JSONValue) {
        #expect(parse(text) == expected, "\(text)")
    }

    @Test(
        "invalid documents are refused",
        arguments: [
            "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "'x'", "01", "1.", ".5", "1e", "-", "+1", "NaN", "Infinity",
            "1e400", "tru", "nul", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"a\tb\"", "\"unterminated",
            "{} {}", "[1] x", "{\"a\":1}\u{0}", "/* c */ {}", "{\"a\":1,\"a\":2}", "{\"a\":{\"b\":1,\"b\":1}}",
        ])
    func invalid(text: String) {
        #expect(parse(text) == nil, "\(text.debugDescription) must be refused")
    }

    @Test("invalid UTF-8 is refused")
    func invalidUTF8() {
        #expect((try? JSONParser.parse([0x22, 0xC3, 0x28, 0x22])) == nil)
        #expect((try? JSONParser.parse([0x22, 0xED, 0xA0, 0x80, 0x22])) == nil, "encoded surrogate")
        #expect((try? JSONParser.parse([0x22, 0xC0, 0xAF, 0x22])) == nil, "overlong")
    }

    @Test("nesting is bounded")
    func depth() {
        let ok = String(repeating: "[", count: JSONParser.maximumDepth) + String(repeating: "]", count: JSONParser.maximumDepth)
        #expect(parse(ok) != nil)
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(parse(deep) == nil)
        let deepObject = String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 40)
        #expect(parse(deepObject) == nil)
    }

    @Test("duplicate detection stays correct for large objects")
    func largeObjects() {
        let members = (0..<200).map { "\"k\($0)\":\($0)" }
        #expect(parse("{" + members.joined(separator: ",") + "}") != nil)
        #expect(parse("{" + (members + ["\"k150\":0"]).joined(separator: ",") + "}") == nil)
    }

    @Test("writer output parses back to the same value")
    func roundTrip() throws {
        let value = JSONValue.object(
            JSONObject([
                ("s", .string("quote \" backslash \\ newline \n tab \t control \u{01} unicode é 😀")), ("n", .integer(-5)), ("d", .number(0.25)),
                ("a", .array([.null, .bool(true)])),
            ]))
        #expect(try JSONParser.parse(JSONWriter.bytes(value)) == value)
    }
}

struct Base64URLTests {
    @Test("round trip for every length up to 64")
    func roundTrip() {
        for length in 0...64 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let encoded = Base64URL.encode(bytes)
            #expect(!encoded.contains("=") && !encoded.contains("+") && !encoded.contains("/"))
            #expect(Base64URL.decode(encoded) == bytes)
        }
    }

    @Test("non-canonical input is refused", arguments: ["Zg==", "Zg=", "Z", "Zh", "Zm9=", "Zm9v+", "Zm9v/", "Zm 9v", "Zm9v\n", "Zm9\u{0}", "Zé"])
    func refused(text: String) {
        #expect(Base64URL.decode(text) == nil, "\(text.debugDescription)")
    }

    @Test("known vectors (RFC 4648 §10, url alphabet)")
    func vectors() {
        #expect(Base64URL.decode("") == [])
        #expect(Base64URL.decode("Zg") == Array("f".utf8))
        #expect(Base64URL.decode("Zm8") == Array("fo".utf8))
        #expect(Base64URL.decode("Zm9vYmFy") == Array("foobar".utf8))
        #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
    }
}
