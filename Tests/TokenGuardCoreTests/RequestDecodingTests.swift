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
            ("not json", .null),
        ] {
            do {
                _ = try BatchLineRequest(Array(text.utf8), defaultAt: nil)
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.id == id, "\(text)")
                #expect(error.error.code == .invalidRequest)
                if text.contains("nonce") { #expect(error.error.message == "nonce must be a non-empty string", "worded as the endpoint words it") }
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
                    template.filled(withTenantID: tid, equals: candidate) == filled.sameBytes(as: candidate),
                    "\(template.debugDescription) vs \(candidate.debugDescription)")
            }
        }
    }
}
