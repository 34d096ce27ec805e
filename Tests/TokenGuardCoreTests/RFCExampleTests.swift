import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// RFC 7515 Appendix A.2 (RS256) and A.3 (ES256), and RFC 8037 Appendix A.4 (Ed25519), with their published keys.
struct RFCExampleTests {
    struct Example: Sendable, CustomStringConvertible {
        let name: String
        let jwk: JSONObject
        let jws: String
        var description: String { name }
    }

    static func examples() throws -> [Example] {
        let fixture = try JSONParser.parseObject(Array(try TestPaths.fixture("TokenGuardCoreTests", "rfc-examples.json")))
        return try (fixture["examples"]?.arrayValue ?? []).map { entry in
            let object = try #require(entry.objectValue)
            return Example(
                name: try #require(object["name"]?.stringValue), jwk: try #require(object["jwk"]?.objectValue),
                jws: try #require(object["jws"]?.stringValue))
        }
    }

    static func verifier(_ example: Example) throws -> TokenVerifier {
        let jwks = JSONWriter.string(.object(JSONObject([("keys", .array([.object(example.jwk)]))])))
        return try Verifiers.make(.oidc(name: "rfc", issuer: "joe", audiences: ["unused"]), jwks: jwks)
    }

    @Test("RFC examples verify with their published keys", arguments: try examples())
    func verifies(example: Example) throws {
        let verifier = try Self.verifier(example)
        let result = verifier.verifySignature(token: example.jws)
        #expect((try? result.get()) != nil, "\(example.name): \(result)")
    }

    @Test("RFC examples fail once the payload or signature changes", arguments: try examples())
    func tamperedFails(example: Example) throws {
        let verifier = try Self.verifier(example)
        let parts = example.jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let otherPayload = Base64URL.encode(Array("{\"iss\":\"joe\",\"exp\":1300819381}".utf8))
        var signature = Array(parts[2].utf8)
        signature[5] = signature[5] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        for token in ["\(parts[0]).\(otherPayload).\(parts[2])", "\(parts[0]).\(parts[1]).\(String(decoding: signature, as: UTF8.self))"] {
            guard case .failure(let error) = verifier.verifySignature(token: token) else {
                Issue.record("\(example.name): tampered token verified")
                continue
            }
            #expect(error.code == .invalidSignature)
        }
    }

    @Test("RFC 7515 A.2 claims are read after the signature: the issuer and expiry are judged")
    func claimsOfA2() throws {
        let example = try #require(try Self.examples().first { $0.name.contains("A.2") })
        let verifier = try Self.verifier(example)
        // The payload has no aud: with the signature good, the audience check is what fails.
        #expect(verifier.verify(token: example.jws, nonce: nil, at: 1_300_819_000).code == .invalidAudience)
    }
}
