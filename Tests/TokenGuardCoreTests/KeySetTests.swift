import Foundation
import Testing
import TokenGuardCore
import TokenGuardTestSupport

struct KeySetTests {
    func parse(_ keys: [JSONObject]) throws -> KeySet {
        try KeySet.parse(jwks: JSONWriter.bytes(.object(JSONObject([("keys", .array(keys.map(JSONValue.object)))]))))
    }

    @Test("keys not for signatures, with unknown algs or bad material are skipped with a reason")
    func skipped() throws {
        let rsa = try SharedTestKeys.rsa()
        let ec = try SharedTestKeys.p256()
        var encryption = try rsa.jwk()
        encryption.set("use", .string("enc"))
        encryption.set("kid", .string("enc-key"))
        var encryptOps = try rsa.jwk()
        encryptOps.set("key_ops", .array([.string("encrypt")]))
        encryptOps.set("kid", .string("ops-key"))
        var hmacAlg = try rsa.jwk()
        hmacAlg.set("alg", .string("HS256"))
        var mismatched = try ec.jwk()
        mismatched.set("alg", .string("RS256"))
        var offCurve = try ec.jwk()
        offCurve.set("y", .string(Base64URL.encode([UInt8](repeating: 1, count: 32))))
        var shortX = try ec.jwk()
        shortX.set("x", .string(Base64URL.encode([UInt8](repeating: 1, count: 31))))
        let oct = JSONObject([("kty", .string("oct")), ("k", .string("c2VjcmV0")), ("kid", .string("hmac"))])
        let badBase64 = JSONObject([("kty", .string("RSA")), ("n", .string("abc=")), ("e", .string("AQAB")), ("kid", .string("bad"))])
        var evenExponent = try rsa.jwk()
        evenExponent.set("e", .string(Base64URL.encode([0x01, 0x00, 0x00])))
        let set = try parse([encryption, encryptOps, hmacAlg, mismatched, offCurve, shortX, oct, badBase64, evenExponent, try rsa.jwk()])
        #expect(set.keys.count == 1)
        #expect(set.skipped.count == 9)
        #expect(set.contains(keyID: rsa.keyID))
        // Keys beyond the limit are reported, not dropped silently.
        let many = try (0...KeySet.maximumKeys).map { index in
            var jwk = try rsa.jwk()
            jwk.set("kid", .string("k\(index)"))
            return jwk
        }
        let capped = try parse(many)
        #expect(capped.keys.count == KeySet.maximumKeys)
        #expect(capped.skipped.map(\.reason) == ["1 more key beyond the first \(KeySet.maximumKeys) not read"])
        // kty by bytes: "O" + KELVIN SIGN + "P" equals "OKP" as a String, and is no key type.
        var kelvin = try SharedTestKeys.ed25519().jwk()
        kelvin.set("kty", .string("O\u{212A}P"))
        #expect("O\u{212A}P" == "OKP")
        let kelvinSet = try parse([kelvin, try rsa.jwk()])
        #expect(kelvinSet.keys.count == 1 && kelvinSet.skipped.count == 1, "\(kelvinSet.skipped)")
        // The report shows a skipped key's kid (the provider's text) capped in bytes.
        encryption.set("kid", .string(String(repeating: "k", count: 6_000)))
        let report = try parse([encryption, try rsa.jwk()]).skipped.json
        guard case .array(let entries) = report, case .object(let entry)? = entries.first, case .string(let kid)? = entry["kid"] else {
            return #expect(Bool(false), "\(report)")
        }
        #expect(kid.utf8.count <= 256 + "…".utf8.count && kid.hasPrefix("kkkk"), "\(kid.utf8.count) bytes")
    }

    @Test("JWKS documents: size bound, shape, thumbprints")
    func documents() throws {
        #expect(throws: VerificationError.self) { try KeySet.parse(jwks: Array("[]".utf8)) }
        #expect(throws: VerificationError.self) { try KeySet.parse(jwks: Array("{\"keys\":{}}".utf8)) }
        let big = [UInt8](repeating: 0x20, count: KeySet.maximumDocumentBytes + 1)
        #expect((try? KeySet.parse(jwks: big)) == nil)
        do {
            _ = try KeySet.parse(jwks: Array("{\"keys\":[]".utf8))
            Issue.record("truncated JWKS must fail")
        } catch {
            #expect(error.code == .keysUnavailable, "a bad JWKS is an outage, not a token fault")
        }
        // RFC 7638 §3.1 example thumbprint.
        let rfcKey = JSONObject([
            ("kty", .string("RSA")),
            (
                "n",
                .string(
                    "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
                )
            ),
            ("e", .string("AQAB")), ("alg", .string("RS256")), ("kid", .string("2011-04-29")),
        ])
        let set = try parse([rfcKey])
        #expect(set.keys.first?.thumbprint == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs")
    }
}
