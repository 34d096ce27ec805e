import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// Differential test against libjwt 1.10 (an independent C implementation over OpenSSL).
///
/// Thousands of generated tokens and mutations of them (flipped bits, swapped, dropped or truncated segments,
/// altered claims, re-encoded base64, changed algorithms) must get the same accept/reject from tokenguard's
/// JWS layer (structure, algorithm, key, signature, payload a JSON object) and from `jwt_decode` with the PEM key,
/// for the algorithms libjwt supports (RS256/384/512, ES256/384). Claims are not compared: libjwt checks none.
///
/// Deliberate differences, each recognised by `deliberateDifference` and counted, never silently ignored:
/// - **lenient-base64**: libjwt's decoder accepts what is not canonical unpadded base64url (padding, `+`/`/`,
///   non-zero trailing bits, characters it skips); tokenguard refuses it (`malformed_token`), so no token has
///   two accepted spellings.
/// - **duplicate-members**: a header or payload with a repeated member name; tokenguard refuses, libjwt keeps one.
/// Any other disagreement fails the test.
struct LibJWTDifferentialTests {
    struct Case {
        let key: TestKey
        let verifier: TokenVerifier
        let reference: LibJWTReference
    }

    static func cases() throws -> [Case] {
        let keys = [
            try SharedTestKeys.rsa(), try SharedTestKeys.key("rsa-rs384", .rsa(bits: 2048), algorithm: .rs384),
            try SharedTestKeys.key("rsa-rs512", .rsa(bits: 3072), algorithm: .rs512), try SharedTestKeys.p256(), try SharedTestKeys.p384(),
        ]
        return try keys.map { key in
            let policy = ProviderPolicy.oidc(name: "diff", issuer: "https://idp.example", audiences: ["x"])
            return Case(
                key: key, verifier: try Verifiers.make(policy, keys: [key]),
                reference: LibJWTReference(publicKeyPEM: try key.signingKey.publicKeyPEM()))
        }
    }

    /// tokenguard's JWS-layer answer, made comparable with libjwt's: the signature verifies and the payload is JSON.
    static func tokenguardAccepts(_ verifier: TokenVerifier, _ token: String) -> (Bool, VerificationError?) {
        switch verifier.verifySignature(token: token) {
        case .failure(let error): return (false, error)
        case .success(let verified):
            do {
                _ = try JSONParser.parseObject(verified.jws.payload)
                return (true, nil)
            } catch {
                return (false, VerificationError(.malformedToken, "payload not a JSON object: \(error)"))
            }
        }
    }

    /// Decodes base64 the lenient way libjwt does, to recognise a non-canonical spelling of the same bytes.
    static func lenientDecode(_ text: Substring) -> [UInt8]? {
        var cleaned = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        cleaned = String(cleaned.prefix { $0 != "=" })
        guard cleaned.count % 4 != 1 else { return nil }
        let canonicalLength = cleaned.count
        // Re-encode after clearing trailing bits: decode the bytes the prefix determines.
        let bytes = (canonicalLength * 6) / 8
        var bits: UInt32 = 0
        var bitCount = 0
        var out: [UInt8] = []
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for character in cleaned.utf8 {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            bits = bits << 6 | UInt32(value)
            bitCount += 6
            if bitCount >= 8 {
                bitCount -= 8
                out.append(UInt8(truncatingIfNeeded: bits >> UInt32(bitCount)))
            }
        }
        return Array(out.prefix(bytes))
    }

    static func deliberateDifference(_ token: String, tokenguardError: VerificationError?) -> String? {
        guard let error = tokenguardError, error.code == .malformedToken else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 3, parts.allSatisfy({ lenientDecode($0) != nil }),
            parts.contains(where: { Base64URL.decode(String($0)) == nil })
        {
            return "lenient-base64"
        }
        if error.message.contains("duplicate") { return "duplicate-members" }
        return nil
    }

    static func mutations(of token: String, key: TestKey, random: inout SeededRandom) throws -> [String] {
        let parts = segments(token)
        var bytes = Array(token.utf8)
        var result: [String] = []
        for _ in 0..<4 {
            var flipped = bytes
            let index = Int.random(in: 0..<flipped.count, using: &random)
            flipped[index] ^= UInt8(1 << Int.random(in: 0..<7, using: &random))
            result.append(String(decoding: flipped, as: UTF8.self))
        }
        result.append("\(parts[1]).\(parts[0]).\(parts[2])")
        result.append("\(parts[0]).\(parts[2]).\(parts[1])")
        result.append("\(parts[0]).\(parts[1]).")
        result.append("\(parts[0]).\(parts[1])")
        result.append("\(parts[0])..\(parts[2])")
        result.append(String(token.prefix(Int.random(in: 1..<token.count, using: &random))))
        result.append(token + "." + parts[2])
        result.append(parts[0] + "=." + parts[1] + "." + parts[2])
        result.append(parts[0] + "." + parts[1] + "." + parts[2] + "==")
        result.append(token.replacingOccurrences(of: "_", with: "/").replacingOccurrences(of: "-", with: "+"))
        // Altered claim, not re-signed.
        var claims = try JSONParser.parseObject(try #require(Base64URL.decode(parts[1])))
        claims.set("sub", .string("attacker"))
        result.append(parts[0] + "." + Base64URL.encode(JSONWriter.bytes(.object(claims))) + "." + parts[2])
        // Altered claim, re-signed with another key of the same type.
        let other = try SharedTestKeys.key("other-\(key.algorithm.rawValue)", key.signingKey.kind, algorithm: key.algorithm)
        result.append(try other.sign(claims, keyID: key.keyID))
        // Algorithm changes, not re-signed, and alg none.
        for alg in ["none", "HS256", key.algorithm == .rs256 ? "RS512" : "RS256", "ES256"] {
            let header = Base64URL.encode(Array("{\"alg\":\"\(alg)\",\"kid\":\"\(key.keyID)\"}".utf8))
            result.append("\(header).\(parts[1]).\(parts[2])")
            result.append("\(header).\(parts[1]).")
        }
        // Duplicate payload member, validly signed.
        var text = JSONWriter.string(.object(claims))
        text.removeLast()
        result.append(try key.signRaw(header: "{\"alg\":\"\(key.algorithm.rawValue)\",\"kid\":\"\(key.keyID)\"}", payload: text + ",\"sub\":\"x\"}"))
        // Payload that is not JSON, validly signed.
        result.append(try key.signRaw(header: "{\"alg\":\"\(key.algorithm.rawValue)\",\"kid\":\"\(key.keyID)\"}", payload: "not json"))
        bytes.removeAll()
        return result
    }

    @Test("tokenguard and libjwt agree on accept/reject, except the listed deliberate differences")
    func differential() async throws {
        var random = SeededRandom(seed: 0x7041_2026)
        var compared = 0
        var bothAccepted = 0
        var differences: [String: Int] = [:]
        var mutatedAccepted: [String] = []
        for testCase in try Self.cases() {
            for index in 0..<40 {
                // CPU-bound: let other tests' tasks (servers, timers) run on the shared cooperative pool.
                await Task.yield()
                var claims = JSONObject([
                    ("iss", .string("https://idp.example")), ("aud", .string("x")), ("sub", .string("user-\(index)")),
                    ("iat", .integer(Verifiers.now)), ("exp", .integer(Verifiers.now + Int64(index) * 60 + 60)),
                ])
                if index % 3 == 0 { claims.set("email", .string("u\(index)@example.com")) }
                if index % 5 == 0 { claims.set("nested", .object(JSONObject([("a", .array([.integer(1), .string("\u{e9}")]))]))) }
                let token = try testCase.key.sign(claims)
                for candidate in [token] + (try Self.mutations(of: token, key: testCase.key, random: &random)) {
                    let (ours, error) = Self.tokenguardAccepts(testCase.verifier, candidate)
                    let theirs = testCase.reference.accepts(candidate)
                    compared += 1
                    if ours && theirs {
                        bothAccepted += 1
                        if candidate != token { mutatedAccepted.append(candidate) }
                    }
                    if candidate == token { #expect(ours && theirs, "\(testCase.key.algorithm): a freshly signed token must be accepted by both") }
                    guard ours != theirs else { continue }
                    if !ours, theirs, let reason = Self.deliberateDifference(candidate, tokenguardError: error) {
                        differences[reason, default: 0] += 1
                    } else {
                        Issue.record(
                            "\(testCase.key.algorithm): tokenguard \(ours ? "accepts" : "rejects (\(error.map(String.init(describing:)) ?? ""))"), libjwt \(theirs ? "accepts" : "rejects"): \(candidate.prefix(120))"
                        )
                    }
                }
            }
        }
        #expect(compared >= 5_000)
        #expect(bothAccepted >= 200)
        // Every mutation differs from a validly signed token by our key, so neither verifier may accept one.
        #expect(mutatedAccepted.isEmpty, "mutations accepted: \(mutatedAccepted.prefix(3))")
        print("libjwt differential: \(compared) tokens compared, \(bothAccepted) accepted by both, deliberate differences: \(differences)")
    }
}
