import Foundation
import Testing
import TokenGuardTestSupport

@testable import TokenGuardCore

#if canImport(Glibc)
    import Glibc
#endif

/// Request decoding shared by the HTTP API and the batch tool, and the batch line reader, including the
/// properties the fuzz targets check (Fuzz/Sources), here on fixed and seeded inputs.
struct RequestDecodingTests {
    func object(_ text: String) throws -> JSONObject { try JSONParser.parseObject(Array(text.utf8)) }

    @Test("verify bodies: strict members and types, each refusal a clear invalid_request")
    func verifyBodies() throws {
        let ok = try VerifyRequest(try object(#"{"provider":"apple","token":"a.b.c","nonce":"n","explain":true}"#))
        #expect(ok == VerifyRequest(provider: "apple", token: "a.b.c", nonce: "n", explain: true))
        #expect(try VerifyRequest(try object(#"{"provider":"apple","token":"t","nonce":null,"explain":null}"#)).nonce == nil)
        let refused: [(String, String)] = [
            (#"{"provider":"apple"}"#, "token is required"),
            (#"{"token":"t"}"#, "provider is required"),
            (#"{"provider":"","token":"t"}"#, "provider must be a non-empty string"),
            (#"{"provider":"apple","token":""}"#, "token is empty"),
            (#"{"provider":"apple","token":7}"#, "token must be a string"),
            (#"{"provider":"apple","token":"t","nonce":""}"#, "nonce must be a non-empty string"),
            (#"{"provider":"apple","token":"t","explain":"yes"}"#, "explain must be a boolean"),
            (#"{"provider":"apple","token":"t","at":5}"#, "unknown member \"at\""),
        ]
        for (body, message) in refused {
            let parsed = try object(body)
            do throws(VerificationError) {
                _ = try VerifyRequest(parsed)
                Issue.record("accepted \(body)")
            } catch {
                #expect(error.code == .invalidRequest)
                #expect(error.message.contains(message), "\(body): \(error.message)")
            }
        }
        #expect(throws: VerificationError.self) { try VerifyRequest.parseBody(Array("[1]".utf8)) }
        #expect(throws: VerificationError.self) { try VerifyRequest.parseBody(Array(String(repeating: "[", count: 60_000).utf8)) }
    }

    @Test("hostile text quoted in a refusal is capped in UTF-8 bytes, whatever its characters")
    func quotedTextIsCappedInBytes() throws {
        #expect("kid-1".excerpt(bytes: 8) == "kid-1")
        #expect("abcdefghij".excerpt(bytes: 4) == "abcd…")
        // é is 2 bytes: a cut never splits a scalar.
        #expect("ééé".excerpt(bytes: 5) == "éé…")
        // One Character of 10,000 combining marks: a cap in Characters would quote all 20,001 bytes.
        let combining = "a" + String(repeating: "\u{301}", count: 10_000)
        #expect(combining.count == 1)
        #expect(combining.excerpt(bytes: 32).utf8.count <= 32 + "…".utf8.count)
        let name = "x" + String(repeating: "\\u0301", count: 10_000)
        func refusal(_ decode: () throws -> Void) -> String {
            do {
                try decode()
            } catch let error as VerificationError {
                return error.message
            } catch let invalid as BatchLineRequest.Invalid {
                return invalid.error.message
            } catch {
                return "\(error)"
            }
            return "accepted"
        }
        let messages = [
            refusal { _ = try VerifyRequest.decodeBody(Array((#"{"provider":"apple","token":"t",""# + name + #"":1}"#).utf8)) },
            refusal { _ = try VerifyRequest.batchItems(try object(#"{"items":[],""# + name + #"":1}"#), maximumItems: 3) },
            refusal { _ = try BatchLineRequest(Array((#"{"id":1,"provider":"p","token":"t",""# + name + #"":1}"#).utf8), defaultAt: nil) },
        ]
        for message in messages {
            // In bytes: as Characters, "x" and "x" + U+0301 differ.
            #expect(message.utf8.starts(with: "unknown member \"x\u{301}".utf8), "\(message.excerpt(bytes: 40))")
            #expect(message.utf8.count < 120, "\(message.utf8.count) bytes")
        }
        // The provider a refusal names is the requested one (batch lines, batch items): 64 bytes at most, the longest a
        // configured name can be.
        let refused = VerificationError(.unknownProvider, "no such provider").json(provider: String(repeating: "p", count: 10_000))
        #expect(refused["provider"]?.stringValue == String(repeating: "p", count: 64) + "…")
        #expect(VerificationError(.tokenExpired, "").json(provider: "apple")["provider"]?.stringValue == "apple")
    }

    @Test("the direct reader of verify bodies decides every body as the general path does, and reads the plain ones itself")
    func directReader() throws {
        func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
        func general(_ body: [UInt8]) -> Result<VerifyRequest, VerificationError> {
            Result { () throws(VerificationError) in try VerifyRequest(VerifyRequest.parseBody(body)) }
        }
        func direct(_ body: [UInt8]) -> Result<VerifyRequest, VerificationError> {
            Result { () throws(VerificationError) in try VerifyRequest.decodeBody(body) }
        }
        func readDirectly(_ body: [UInt8]) -> VerifyRequest? { body.withUnsafeBufferPointer { VerifyRequest.directly($0) } }
        // Read by the direct reader itself, as the general path reads them.
        let plain = [
            #"{"provider":"apple","token":"a.b.c"}"#,
            #"{"token":"a.b.c","provider":"apple","nonce":"n","explain":true}"#,
            " {\t\"provider\" : \"apple\" ,\"token\":\"a.b.c\",\"nonce\":null,\"explain\":false}\n",
            #"{"explain":null,"nonce":"n\u00e9\ud83d\ude00","token":"a.b.c","provider":"ap\/ple"}"#,
            #"{"provider":"ap\/ple","token":"x\"y"}"#,
            "{\"provider\":\"appl\u{e9}\",\"token\":\"t\u{1F600}\"}",
        ]
        // Left to the general path, which words the refusal (or, for the last and names written with escapes, decodes it).
        let other = [
            #"{"\u0070rovider":"apple","tok\u0065n":"x\"y"}"#,
            #"{"provider":"apple","token":"a","token":"b"}"#, #"{"provider":"apple","token":"t","at":5}"#, #"{"provider":"apple"}"#,
            #"{"provider":"","token":"t"}"#, #"{"provider":"apple","token":""}"#, #"{"provider":"apple","token":"t","nonce":""}"#,
            #"{"provider":"apple","token":7}"#, #"{"provider":"apple","token":"t","explain":"yes"}"#,
            #"{"provider":"apple","token":"t","explain":0}"#, #"{"provider":"apple","token":"t"} x"#, #"{"provider":"apple","token":"t",}"#,
            #"{}"#, "[1]", "", " ", "\u{FEFF}{}", #"{"provider":"apple","token":"t","nonce":nul}"#,
            #"{"provider":"apple","token":"t","explain":tru}"#, #"{"provider":"apple","token":"t\ud800"}"#,
            "{\"provider\":\"apple\",\"token\":\"t\u{1}\"}", #"{"provider":"apple","token":"t""#,
            #"{"provider":"apple","token":{"a":1}}"#, #"{"provider":"apple","token":"t","nonce":["n"]}"#,
            #"{"provider":"apple","token":"t","explain":true,"explain":false}"#,
            #"{"provider":"apple","token":"t","nonce":null,"nonce":"n"}"#, #"{"provider":"apple","token":"t","id":1}"#,
            #"{"provider":"apple","token":"t","Provider":"x"}"#, "{\"provider\":\"apple\",\"token\":\"t\",\"provide\u{301}r\":\"x\"}",
        ]
        for text in plain {
            let body = bytes(text)
            #expect(readDirectly(body) != nil, "not read directly: \(text)")
            #expect(try direct(body).get() == general(body).get(), "\(text)")
        }
        for text in other {
            #expect(readDirectly(bytes(text)) == nil, "read directly: \(text)")
            #expect(direct(bytes(text)) == general(bytes(text)), "\(text)")
        }
        // Mutations of every body: a byte changed to one that matters to JSON, removed, repeated, or the end cut off.
        var random = SeededRandom(seed: 20_261_124)
        var readByDirectReader = 0
        for text in plain + other {
            let base = bytes(text)
            for _ in 0..<1_500 {
                let body = Self.mutated(base, using: &random)
                if readDirectly(body) != nil { readByDirectReader += 1 }
                let (expected, decoded) = (general(body), direct(body))
                #expect(decoded == expected, "\(String(decoding: body, as: UTF8.self))")
                if decoded != expected { return }
            }
        }
        // The mutations reach the direct reader's acceptance, not only the general path.
        #expect(readByDirectReader > 500, "\(readByDirectReader)")
    }

    /// `base` with one to three mutations: a byte changed to one that matters to JSON, removed, repeated, or the end
    /// cut off.
    static func mutated(_ base: [UInt8], using random: inout SeededRandom) -> [UInt8] {
        let interesting = Array(#"{}[]",:\ -0123456789eEtfnul.aprvidkoxc"#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xE9, 0xFF, 0x09, 0x0A]
        var bytes = base
        for _ in 0..<Int.random(in: 1...3, using: &random) where !bytes.isEmpty {
            let at = Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<4, using: &random) {
            case 0: bytes[at] = interesting.randomElement(using: &random)!
            case 1: bytes.remove(at: at)
            case 2: bytes.insert(bytes[at], at: at)
            default: bytes.removeLast(Int.random(in: 0...min(4, bytes.count), using: &random))
            }
        }
        return bytes
    }

    @Test("the direct reader of batch lines decides every line as the general path does, and reads the plain ones itself")
    func batchLineDirectReader() throws {
        func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
        /// Everything a line's decoding gives, ids as their JSON text (a number's as written): equal results echo
        /// the same bytes.
        func outcome(_ decode: () throws(BatchLineRequest.Invalid) -> BatchLineRequest) -> String {
            func text(_ value: JSONValue) -> String { String(decoding: JSONWriter.bytes(value), as: UTF8.self) }
            do {
                let line = try decode()
                return "ok \(text(line.id)) \(line.provider.utf8.map(\.self)) \(line.token.utf8.map(\.self)) "
                    + "\(line.nonce.map { Array($0.utf8) } ?? []) \(line.nonce == nil) \(line.at.map(String.init) ?? "-")"
            } catch {
                return "invalid \(text(error.id)) \(error.provider.map { Array($0.utf8) } ?? []) \(error.error.code) \(error.error.message)"
            }
        }
        func general(_ line: [UInt8]) -> String {
            outcome { () throws(BatchLineRequest.Invalid) in try BatchLineRequest(generally: line, defaultAt: 77) }
        }
        func decoded(_ line: [UInt8]) -> String { outcome { () throws(BatchLineRequest.Invalid) in try BatchLineRequest(line, defaultAt: 77) } }
        func readDirectly(_ line: [UInt8]) -> BatchLineRequest? { line.withUnsafeBufferPointer { BatchLineRequest.directly($0, defaultAt: 77) } }
        let plain = [
            #"{"id":1,"provider":"apple","token":"a.b.c","nonce":"n","at":5}"#,
            #"{"token":"a.b.c","provider":"apple"}"#,
            #"{"provider":"","token":"t","nonce":null,"at":null,"id":null}"#,
            " {\t\"at\" : 253402300799 , \"provider\":\"p\",\"token\":\"t\",\"id\":{\"a\":[1,2.50,-0,1e3]}}\n",
            #"{"id":18446744073709551615,"provider":"ap\/ple","token":"x\"y","nonce":"n\u00e9\ud83d\ude00"}"#,
            #"{"id":"1.10","provider":"apple","token":"t","at":0}"#,
            "{\"id\":[\"\u{e9}\"],\"provider\":\"appl\u{e9}\",\"token\":\"t\u{1F600}\"}",
        ]
        // Left to the general path (which decodes the names written with escapes to the same request).
        let other = [
            #"{"id":"1.10","\u0070rovider":"apple","tok\u0065n":"t","at":0}"#,
            #"{"provider":"apple","token":"a","token":"b"}"#, #"{"provider":"apple"}"#, #"{"token":"t"}"#, #"{"provider":7,"token":"t"}"#,
            #"{"provider":"apple","token":""}"#, #"{"provider":"apple","token":"t","nonce":""}"#, #"{"provider":"apple","token":7}"#,
            #"{"provider":"apple","token":"t","at":-1}"#, #"{"provider":"apple","token":"t","at":253402300800}"#,
            #"{"provider":"apple","token":"t","at":1.5}"#, #"{"provider":"apple","token":"t","at":1e3}"#,
            #"{"provider":"apple","token":"t","at":"5"}"#,
            #"{"provider":"apple","token":"t","at":99999999999999999999}"#, #"{"provider":"apple","token":"t","extra":1}"#,
            #"{"provider":"apple","token":"t","id":1,"id":2}"#, #"{"provider":"apple","token":"t","at":null,"at":5}"#,
            #"{"provider":"apple","token":"t"} x"#, #"{"provider":"apple","token":"t",}"#, #"{}"#, "[1]", "", " ", "\u{FEFF}{}",
            #"{"provider":"apple","token":"t","nonce":nul}"#, #"{"provider":"apple","token":"t\ud800"}"#,
            "{\"provider\":\"apple\",\"token\":\"t\u{1}\"}", #"{"provider":"apple","token":"t""#, #"{"id":01,"provider":"a","token":"t"}"#,
            #"{"id":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"provider":"a","token":"t"}"#,
            #"{"id":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"provider":"a","token":"t","at":"x"}"#,
            #"{"provider":"apple","token":"t","Provider":"x"}"#, #"{"provider":"apple","token":{"a":1}}"#,
        ]
        for text in plain {
            #expect(readDirectly(bytes(text)) != nil, "not read directly: \(text)")
            #expect(decoded(bytes(text)) == general(bytes(text)), "\(text)")
        }
        for text in other {
            #expect(readDirectly(bytes(text)) == nil, "read directly: \(text)")
            #expect(decoded(bytes(text)) == general(bytes(text)), "\(text)")
        }
        var random = SeededRandom(seed: 20_261_125)
        var readByDirectReader = 0
        for text in plain + other {
            let base = bytes(text)
            for _ in 0..<1_500 {
                let line = Self.mutated(base, using: &random)
                if readDirectly(line) != nil { readByDirectReader += 1 }
                let (expected, actual) = (general(line), decoded(line))
                #expect(actual == expected, "\(String(decoding: line, as: UTF8.self))")
                if actual != expected { return }
            }
        }
        #expect(readByDirectReader > 500, "\(readByDirectReader)")
    }

    @Test("batch bodies: only items, an array within the limit; each item decoded on its own")
    func batchBodies() throws {
        let items = try VerifyRequest.batchItems(try object(#"{"items":[{"provider":"a","token":"t"},5,{"token":"t"}]}"#), maximumItems: 3)
        #expect(items.count == 3)
        #expect(try VerifyRequest.item(items[0]).provider == "a")
        #expect(throws: VerificationError.self) { try VerifyRequest.item(items[1]) }
        #expect(throws: VerificationError.self) { try VerifyRequest.item(items[2]) }
        #expect(throws: VerificationError.self) { try VerifyRequest.batchItems(try object(#"{"items":[1,2,3,4]}"#), maximumItems: 3) }
        #expect(throws: VerificationError.self) { try VerifyRequest.batchItems(try object(#"{"items":{}}"#), maximumItems: 3) }
        #expect(throws: VerificationError.self) { try VerifyRequest.batchItems(try object(#"{"items":[],"more":1}"#), maximumItems: 3) }
    }

    @Test("batch lines: id echoed even when the rest is wrong; at within 0…9999-12-31")
    func batchLines() throws {
        let line = try BatchLineRequest(Array(#"{"id":[1],"provider":"p","token":"t","nonce":"n","at":5}"#.utf8), defaultAt: 9)
        #expect(line.id == .array([.integer(1)]) && line.provider == "p" && line.nonce == "n" && line.at == 5)
        #expect(try BatchLineRequest(Array(#"{"provider":"p","token":"t"}"#.utf8), defaultAt: 9).at == 9)
        for (text, id) in [
            (#"{"id":"x","provider":"p","token":"t","at":-1}"#, JSONValue.string("x")),
            (#"{"id":"x","provider":"p","token":"t","at":253402300800}"#, .string("x")),
            (#"{"id":2,"provider":"p","token":"t","at":1.5}"#, .integer(2)),
            (#"{"id":3,"provider":5,"token":"t"}"#, .integer(3)),
            (#"{"id":4,"provider":"p"}"#, .integer(4)),
            (#"{"id":5,"provider":"p","token":"t","nonce":""}"#, .integer(5)),
            (#"{"id":6,"provider":"p","token":"t","nonce":7}"#, .integer(6)),
            // A member tokenguard does not know, as in a request body (red team: a nonce written "Nonce" was ignored, and
            // the token verified with no nonce).
            (#"{"id":7,"provider":"p","token":"t","Nonce":"n"}"#, .integer(7)),
            (#"{"id":8,"provider":"p","token":"t","nonce ":"n"}"#, .integer(8)),
            (#"{"id":9,"provider":"p","token":"t","ts":"2026-11-24"}"#, .integer(9)),
            ("not json", .null),
        ] {
            do {
                _ = try BatchLineRequest(Array(text.utf8), defaultAt: nil)
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.id == id, "\(text)")
                #expect(error.error.code == .invalidRequest)
                if text.contains("\"nonce\":") {
                    #expect(error.error.message == "nonce must be a non-empty string", "worded as the endpoint words it")
                }
                if text.contains("Nonce") { #expect(error.error.message.hasPrefix("unknown member \"Nonce\""), "\(error.error.message)") }
            }
        }
    }
}

struct IssuerTemplateTests {
    @Test("a template filled in place matches exactly what the filled string would")
    func filledInPlace() {
        let tid = "9188040d-6c67-4c5b-b112-36a304b66dad"
        let templates = [
            "https://login.microsoftonline.com/{tenantid}/v2.0", "https://sts.windows.net/{tenantid}/", "{tenantid}", "{tenantid}{tenantid}",
            "no placeholder", "", "{tenantid", "x{tenantid}y{tenantid}z", "{{tenantid}}",
        ]
        for template in templates {
            let filled = template.replacingTenantID(with: tid)
            let candidates = [
                filled, filled + "/", String(filled.dropLast()), template, "", filled.uppercased(), "x" + filled,
                template.replacingTenantID(with: "other"),
            ]
            for candidate in candidates {
                #expect(
                    TenantIssuerTemplate(template).matches(tid: tid, issuer: candidate) == filled.sameBytes(as: candidate),
                    "\(template.debugDescription) vs \(candidate.debugDescription)")
            }
        }
    }

    @Test("filled in place and the filled string agree on seeded templates and candidates built from the same pieces")
    func filledInPlaceSeeded() {
        var random = SeededRandom(seed: 0x7E4A)
        let pieces = ["{tenantid}", "{", "}", "{tenantid", "tenantid}", "a", "/", "v2.0", "é", "{tenantid}{tenantid}"]
        let tids = ["9188040d-6c67-4c5b-b112-36a304b66dad", "", "{tenantid}", "a"]
        func text(_ count: Int, from pieces: [String]) -> String {
            (0..<count).map { _ in pieces[Int(random.next() % UInt64(pieces.count))] }.joined()
        }
        var matches = 0
        for _ in 0..<4_000 {
            let template = text(Int(random.next() % 6), from: pieces)
            let tid = tids[Int(random.next() % UInt64(tids.count))]
            let filled = template.replacingTenantID(with: tid)
            let candidate = random.next() % 2 == 0 ? filled : text(Int(random.next() % 6), from: pieces + [tid])
            let expected = filled.sameBytes(as: candidate)
            if expected { matches += 1 }
            #expect(
                TenantIssuerTemplate(template).matches(tid: tid, issuer: candidate) == expected,
                "\(template.debugDescription) \(tid) \(candidate.debugDescription)"
            )
        }
        #expect(matches > 1_000)
    }

    @Test("a tenant GUID: lowercase 8-4-4-4-12 hex, as bytes")
    func tenantGUIDs() {
        func reference(_ text: String) -> Bool {
            let bytes = Array(text.utf8)
            guard bytes.count == 36 else { return false }
            return bytes.enumerated().allSatisfy { index, byte in
                [8, 13, 18, 23].contains(index) ? byte == UInt8(ascii: "-") : Array("0123456789abcdef".utf8).contains(byte)
            }
        }
        let valid = "9188040d-6c67-4c5b-b112-36a304b66dad"
        #expect(GUID.isValid(valid))
        var random = SeededRandom(seed: 0x6D1)
        let alphabet = Array("0123456789abcdefgABCDEF-/:`@G\u{0}é".unicodeScalars)
        for _ in 0..<5_000 {
            var scalars = Array(valid.unicodeScalars)
            for _ in 0..<Int(random.next() % 3) {
                let at = Int(random.next() % UInt64(scalars.count))
                switch random.next() % 3 {
                case 0: scalars[at] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                case 1: scalars.remove(at: at)
                default: scalars.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: at)
                }
            }
            let text = String(String.UnicodeScalarView(scalars))
            #expect(GUID.isValid(text) == reference(text), "\(text.debugDescription)")
        }
    }
}
