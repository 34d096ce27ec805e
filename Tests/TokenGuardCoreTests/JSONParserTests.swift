import Testing

@testable import TokenGuardCore

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

    @Test("a number that is not an Int64 is written back as it was read", arguments: ["18446744073709551615", "1.10", "1e2", "-0.5E-3", "0.1"])
    func numberLiterals(text: String) throws {
        let value = try JSONParser.parse(Array(text.utf8))
        #expect(String(decoding: JSONWriter.bytes(value), as: UTF8.self) == text)
        #expect(value == .number(Double(text)!), "compared by value")
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

    /// A decoder written the plain way (bits into an accumulator), to hold the table decoder to.
    static func referenceDecode(_ text: [UInt8]) -> [UInt8]? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        guard text.count % 4 != 1 else { return nil }
        var bits: UInt32 = 0
        var held = 0
        var out: [UInt8] = []
        for byte in text {
            guard let value = alphabet.firstIndex(of: byte) else { return nil }
            bits = bits << 6 | UInt32(value)
            held += 6
            if held >= 8 {
                held -= 8
                out.append(UInt8(truncatingIfNeeded: bits >> UInt32(held)))
                bits &= (1 << UInt32(held)) - 1
            }
        }
        return bits == 0 ? out : nil  // leftover bits must be zero (canonical)
    }

    @Test("agrees with a plain decoder, and writes nothing past its output, for every length and a bad byte anywhere")
    func differential() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for length in 0...140 {
            for _ in 0..<8 {
                var text = (0..<length).map { _ in alphabet[Int.random(in: 0..<64, using: &generator)] }
                // Mostly canonical endings (zero trailing bits), so the accepting path is tested at every length too.
                if length % 4 > 1, Int.random(in: 0..<4, using: &generator) > 0, let last = alphabet.firstIndex(of: text[length - 1]) {
                    text[length - 1] = alphabet[last & (length % 4 == 2 ? 0x30 : 0x3C)]
                }
                if !text.isEmpty, Bool.random(using: &generator) {
                    // A byte outside the alphabet (or a dot, '=', '+', a high byte) at any position.
                    text[Int.random(in: 0..<text.count, using: &generator)] = [0x2E, 0x3D, 0x2B, 0x2F, 0x00, 0x80, 0xFF, 0x20].randomElement(
                        using: &generator)!
                }
                let expected = Self.referenceDecode(text)
                #expect(Base64URL.decode(text) == expected, "\(String(decoding: text, as: UTF8.self))")
                // Into a buffer of exactly the decoded size, followed by canaries that must survive.
                guard let size = Base64URL.decodedCount(text.count) else { continue }
                var out = [UInt8](repeating: 0xA5, count: size + 16)
                let refusal = text.withUnsafeBufferPointer { input in
                    out.withUnsafeMutableBufferPointer { Base64URL.decode(input, into: UnsafeMutableBufferPointer(rebasing: $0[..<size])) }
                }
                #expect((refusal == nil) == (expected != nil))
                if let expected { #expect(Array(out[..<size]) == expected) }
                #expect(out[size...].allSatisfy { $0 == 0xA5 }, "wrote past the output for length \(length)")
            }
        }
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

/// The payload index must read every document exactly as the tree parser does (the `json-index` fuzz target checks
/// the same properties on arbitrary bytes).
struct IndexedJSONObjectTests {
    static let documents: [String] = [
        "{}", " { } ", "[]", "1", "\"x\"", "", "{", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":1}\u{0}", "{} {}",
        "{\"iss\":\"x\",\"iss\":\"y\"}", "{\"i\\u0073s\":\"x\",\"iss\":\"y\"}", "{\"iss\":\"x\",\"i\\u0073s\":\"y\"}",
        "{\"i\\u0073s\":\"x\",\"\\u0069ss\":\"y\"}", "{\"é\":1,\"\\u00e9\":2}", "{\"e\\u0301\":1,\"é\":2}",
        "{\"a\":\"\\ud800\"}", "{\"a\":\"\\ud83d\\ude00\",\"b\":\"caf\u{e9}\"}", "{\"a\":1e400}", "{\"a\":-0,\"b\":1.0,\"c\":1E2,\"d\":0.1}",
        "{\"a\":9223372036854775808,\"b\":-9223372036854775808}",
        "{\"a\":-0,\"b\":0,\"c\":-1,\"d\":-12345678901234567,\"e\":123456789012345678,\"f\":1234567890123456789}",
        "{\"a\":9223372036854775807,\"b\":-9223372036854775807,\"c\":-0.0,\"d\":0e0,\"e\":-0E-0,\"f\":10.50}",
        "{\"a\":[-0,1,-1e0],\"b\":{\"c\":-0},\"t\":true,\"f\":false,\"n\":null}", "{\"a\":\"x\\/y\\\"z\\\\\",\"b\":\"\\u0000\"}",
        "{\"a\":{\"b\":1,\"b\":2}}", "{\"a\":[1,{\"c\":[true,false,null]}], \"n\" : null }", "{\"a\":\"\t\"}", "{\"a\":tru}",
        String(repeating: "{\"a\":", count: 31) + "1" + String(repeating: "}", count: 31),
        String(repeating: "{\"a\":", count: 32) + "1" + String(repeating: "}", count: 32),
        String(repeating: "{\"a\":", count: 33) + "1" + String(repeating: "}", count: 33),
        "{" + (0..<40).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k\\u0033\":0}",
        "{" + (0..<40).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k\\u0034\\u0030\":0}",
        "{" + (0..<40).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}",
        // Around the member count where duplicates stop being found by comparing fingerprints and a set takes over.
        "{" + (0..<20).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k0\":0}",
        "{" + (0..<31).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k\\u0033\\u0030\":0}",
        "{" + (0..<32).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k31\":0}",
        "{" + (0..<32).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k0\":0}",
        "{" + (0..<33).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k32\":0}",
        "{" + (0..<33).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}",
        // Around the copy-as-it-stands shortcut: each of these differs from its canonical form in one way, or not at all.
        "{}", "{ }", "{\"a\":1}", "{\"a\" :1}", "{\"a\": 1}", "{\"a\":1 }", " {\"a\":1} ", "{\"a\":1, \"b\":2}", "{\"a\":-0}", "{\"a\":-5}",
        "{\"a\":123456789012345678}", "{\"a\":-12345678901234567}", "{\"a\":-123456789012345678}", "{\"a\":1234567890123456789}",
        "{\"a\":9999999999999999999}", "{\"a\":-9999999999999999999}", "{\"a\":1.0}", "{\"a\":1e2}", "{\"a\":\"-\"}", "{\"a\":\"x\\\"y\"}",
        "{\"a\":\"\\u00e9\"}", "{\"a\":\"é\"}", "{\"\\u0061\":1}",
        "{\"a\":[1]}", "{\"a\":{}}", "{\"a\":true,\"b\":false,\"c\":null,\"d\":\"\",\"e\":0}",
    ]

    @Test("accepts what the parser accepts, with its errors, its values and JSONWriter's bytes", arguments: documents)
    func agreesWithParser(text: String) throws {
        let bytes = Array(text.utf8)
        let tree: Result<JSONObject, JSONParser.Error> = Result { () throws(JSONParser.Error) in try JSONParser.parseObject(bytes) }
        let index: Result<IndexedJSONObject, JSONParser.Error> = Result { () throws(JSONParser.Error) in try IndexedJSONObject(bytes) }
        switch (tree, index) {
        case (.failure(let treeError), .failure(let indexError)):
            #expect(treeError == indexError)
        case (.success(let object), .success(let indexed)):
            #expect(indexed.count == object.count)
            for member in object.members { #expect(indexed[member.name] == member.value, "\(member.name)") }
            #expect(indexed["iss"] == object["iss"])
            #expect(indexed.materialized() == object)
            var written: [UInt8] = []
            indexed.writeCanonical(into: &written)
            #expect(written == JSONWriter.bytes(.object(object)))
            // An object the scan found canonical is written as its own bytes.
            if indexed.isCanonical { #expect(written == Array(bytes[indexed.span])) }
        default:
            Issue.record("the index and the parser disagree on \(text.debugDescription): \(tree) / \(index)")
        }
    }

    @Test(
        "the scan finds an object canonical exactly when nothing lies between its tokens and every value is written as it stands",
        arguments: [
            ("{}", true), ("{ }", false), (" {\"a\":1} ", true), ("{\"a\":1}", true), ("{\"a\" :1}", false), ("{\"a\": 1}", false),
            ("{\"a\":1 }", false), ("{\"a\":1, \"b\":2}", false), ("{\"a\":1,\n\"b\":2}", false), ("{\"a\":-0}", false), ("{\"a\":-5}", true),
            ("{\"a\":0}", true), ("{\"a\":123456789012345678}", true), ("{\"a\":1234567890123456789}", false),
            ("{\"a\":-12345678901234567}", true), ("{\"a\":-123456789012345678}", false), ("{\"a\":1.0}", false), ("{\"a\":1e2}", false),
            ("{\"a\":\"-\"}", true), ("{\"a\":\"x\\\"y\"}", false), ("{\"a\":\"\\u00e9\"}", false), ("{\"a\":\"é\"}", true),
            ("{\"\\u0061\":1}", false), ("{\"a\":[1]}", false), ("{\"a\":{}}", false),
            ("{\"a\":true,\"b\":false,\"c\":null,\"d\":\"\",\"e\":0}", true),
            (
                #"{"iss":"https://appleid.apple.com","aud":"com.example.app","exp":1700003600,"iat":1700000000,"sub":"001234.abc","#
                    + #""email_verified":true}"#, true
            ),
        ])
    func canonicalFlag(text: String, canonical: Bool) throws {
        #expect(try IndexedJSONObject(Array(text.utf8)).isCanonical == canonical)
    }

    @Test("a name's fingerprint from one load is the byte-by-byte one, wherever the name lies in its buffer")
    func fingerprintByLoad() {
        let bytes = (0..<40).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        bytes.withUnsafeBufferPointer { buffer in
            for start in 0...buffer.count {
                for end in start...buffer.count {
                    let expected = IndexedJSONObject.fingerprint(UnsafeBufferPointer(rebasing: buffer[start..<end]))
                    #expect(IndexedJSONObject.fingerprint(in: buffer, range: start..<end) == expected, "\(start)..<\(end)")
                }
            }
        }
    }

    @Test("the duplicate check's bitmap spreads the claim names a verifier reads, whatever their first byte")
    func fingerprintBits() {
        let bits = Set(
            ClaimName.allCases.map { claim in
                Array(claim.text.utf8).withUnsafeBufferPointer { IndexedJSONObject.bit(of: IndexedJSONObject.fingerprint($0)) }
            })
        // 17 names into 64 bits: the hash gives 13 distinct bits; one of the first byte alone would give 10.
        #expect(bits.count >= 13)
        #expect(bits.allSatisfy { $0.nonzeroBitCount == 1 })
    }

    @Test("JSONWriter's integers", arguments: [Int64.min, Int64.min + 1, -10, -1, 0, 1, 9, 10, 1_700_000_000, Int64.max])
    func integers(value: Int64) {
        #expect(JSONWriter.bytes(.integer(value)) == Array(String(value).utf8))
    }

    @Test("a verdict's JSON bytes are its tree's JSON, claims included")
    func verdictBytes() throws {
        let payload = Array(#" {"sub" : "s", "a":[1, {"b": "\u00e9\/"}], "n": -0, "f": 1.0e2, "t": true} "#.utf8)
        let verdict = Verdict(
            provider: "apple", subject: "s", userID: "s", issuer: "i", audience: "a", expiresAt: 2, issuedAt: 1, keyID: "k",
            email: nil, emailVerified: false, tenantID: nil, claims: try JSONParser.parseObject(payload))
        #expect(verdict.jsonBytes == JSONWriter.bytes(.object(verdict.json)))
        // A tree given to a verdict is kept as its JSON text, which reads back as written: 1.0e2 stays 1.0e2.
        #expect(verdict.claim("f") == .number(100))
        #expect(String(decoding: verdict.jsonBytes, as: UTF8.self).contains(#""f":1.0e2"#))
        #expect(verdict.claim("missing") == nil)
    }

    @Test("a batch answer is the id, then the verdict's members: written fresh, or after the verdict's own text")
    func leadingID() throws {
        let payload = Array(#"{"sub":"s","n":-0,"e":"\u00e9"}"#.utf8)
        func verdict() throws -> Verdict {
            Verdict(
                provider: "apple", subject: "s", userID: "s", issuer: "i", audience: "a", expiresAt: 2, issuedAt: nil, keyID: "k",
                email: "e@x", emailVerified: true, tenantID: nil, claims: try IndexedJSONObject(payload))
        }
        let ids: [JSONValue] = [.integer(7), .string("a\"b"), .null, .object(JSONObject([("k", .array([.bool(true)]))]))]
        for id in ids {
            let expected = JSONWriter.withLeadingID(id, try verdict().jsonBytes)
            let fresh = try verdict()
            #expect(VerificationResult.success(fresh).jsonBytes(provider: "apple", leadingID: id) == expected)
            let written = try verdict()
            _ = written.jsonBytes
            #expect(VerificationResult.success(written).jsonBytes(provider: "apple", leadingID: id) == expected)
            let failure = VerificationResult.failure(VerificationError(.tokenExpired, "m"))
            #expect(failure.jsonBytes(provider: "apple", leadingID: id) == JSONWriter.withLeadingID(id, failure.jsonBytes(provider: "apple")))
        }
        #expect(VerificationResult.success(try verdict()).jsonBytes(provider: "apple", leadingID: nil) == (try verdict()).jsonBytes)
    }
}

struct CompactJWSSegmentTests {
    func refusal(_ token: String) -> String? {
        do {
            _ = try CompactJWS.parse(Array(token.utf8), maxBytes: 16384)
            return nil
        } catch {
            return error.message
        }
    }

    @Test("the first bad segment is the one named, whether its length or a byte is wrong")
    func firstBadSegmentNamed() {
        let header = Base64URL.encode(Array(#"{"alg":"RS256"}"#.utf8))
        #expect(refusal("e!J.abcde.sig")?.contains("header") == true, "bad byte in the header, bad length in the payload")
        #expect(refusal("\(header).abcde.sig")?.contains("payload") == true)
        #expect(refusal("\(header).ab!d.abcde")?.contains("payload") == true)
        #expect(refusal("\(header).abcd.ab!d")?.contains("signature") == true)
        #expect(refusal("\(header).abcd.abcde")?.contains("signature") == true)
        #expect(refusal("\(header).abcd.abcd") == nil)
    }

    @Test("dots are found wherever they fall against eight-byte words")
    func dotsAtEveryOffset() throws {
        for headerPad in 0..<8 {
            for payloadLength in 0..<24 {
                let headerJSON = #"{"alg":"RS256","x":"\#(String(repeating: "a", count: headerPad))"}"#
                let token =
                    Base64URL.encode(Array(headerJSON.utf8)) + "." + Base64URL.encode([UInt8](repeating: 0x41, count: payloadLength)) + ".c2ln"
                let jws = try CompactJWS.parse(Array(token.utf8), maxBytes: 16384)
                #expect(Array(jws.payload) == [UInt8](repeating: 0x41, count: payloadLength))
                #expect(Array(jws.signature) == Array("sig".utf8))
                #expect(refusal(token + ".") != nil)
                #expect(refusal(String(token.dropLast(5)) + "c2ln") != nil, "two segments")
            }
        }
    }
}
