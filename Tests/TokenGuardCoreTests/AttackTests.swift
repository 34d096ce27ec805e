import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// Known attacks on JWT verifiers, each of which must be refused with the right code.
struct AttackTests {
    let now = Verifiers.now
    let nonce = "raw-nonce-7f3a"

    func appleSetup() throws -> (TestKey, TokenVerifier) {
        let key = try SharedTestKeys.rsa()
        return (key, try Verifiers.make(Verifiers.apple(), keys: [key]))
    }

    func validAppleToken(_ key: TestKey) throws -> String {
        try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
    }

    @Test("an empty nonce is invalid_request, even against a token whose nonce it would match, fresh or cached")
    func emptyNonce() throws {
        let key = try SharedTestKeys.rsa()
        for policy in [Verifiers.apple(), Verifiers.microsoft()] {
            let verifier = TokenVerifier(
                policy: policy, keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: VerifiedTokenCache(capacity: 16))
            // The token's nonce is exactly what the empty raw nonce gives in this provider's mode.
            var claims = policy.kind == .apple ? ProviderTokens.apple(now: now, rawNonce: nil) : ProviderTokens.microsoft(now: now, rawNonce: nil)
            claims.set("nonce", .string(policy.nonceMode == .sha256 ? SHA256.hexDigest([UInt8]()) : ""))
            let token = try key.sign(claims)
            let result = verifier.verify(token: token, nonce: "", at: now)
            #expect(result.code == .invalidRequest, "\(policy.name)")
            // Cached after a verification without a nonce (where the provider allows one), an empty nonce is still refused.
            if !policy.nonceRequired {
                #expect(verifier.verify(token: token, nonce: nil, at: now).verdict != nil)
                #expect(verifier.verify(token: token, nonce: "", at: now).code == .invalidRequest, "\(policy.name), cached")
            }
        }
    }

    @Test("the unmodified token verifies (so every refusal below is due to the attack)")
    func baseline() throws {
        let (key, verifier) = try appleSetup()
        #expect(verifier.verify(token: try validAppleToken(key), nonce: nonce, at: now).verdict != nil)
    }

    @Test("alg none in any casing is unsupported_algorithm", arguments: ["none", "None", "NONE", "nOnE"])
    func algNone(alg: String) throws {
        let (key, verifier) = try appleSetup()
        let parts = segments(try validAppleToken(key))
        let header = Base64URL.encode(Array("{\"alg\":\"\(alg)\",\"kid\":\"\(key.keyID)\"}".utf8))
        for token in ["\(header).\(parts[1]).", "\(header).\(parts[1]).\(parts[2])"] {
            #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .unsupportedAlgorithm)
        }
    }

    @Test("HS256 signed with the public key's PEM as the secret is unsupported_algorithm", arguments: ["HS256", "HS384", "HS512", "hs256"])
    func hmacKeyConfusion(alg: String) throws {
        let (key, verifier) = try appleSetup()
        let pem = try key.signingKey.publicKeyPEM()
        let claims = JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nonce)))
        let input = Base64URL.encode(Array("{\"alg\":\"\(alg)\",\"kid\":\"\(key.keyID)\"}".utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let mac = HMAC.sha256(key: Array(pem.utf8), message: Array(input.utf8))
        let token = input + "." + Base64URL.encode(mac)
        #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .unsupportedAlgorithm)
    }

    @Test("an algorithm that does not fit the key's type or the key's own alg is refused")
    func algorithmKeyMismatch() throws {
        let rsa = try SharedTestKeys.rsa()
        let ec = try SharedTestKeys.p256()
        let policy = ProviderPolicy.oidc(name: "corp", issuer: "https://appleid.apple.com", audiences: [ProviderTokens.appleAudience])
        let verifier = try Verifiers.make(policy, keys: [rsa, ec])
        let claims = JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nil)))
        // ES256 signed by the EC key but naming the RSA key's kid.
        let esWithRSAKid = try ec.signRaw(header: "{\"alg\":\"ES256\",\"kid\":\"\(rsa.keyID)\"}", payload: claims)
        #expect(verifier.verify(token: esWithRSAKid, nonce: nil, at: now).code == .unsupportedAlgorithm)
        // PS256 with an RSA key whose JWK says RS256.
        let psWithRS256Key = try rsa.signRaw(header: "{\"alg\":\"PS256\",\"kid\":\"\(rsa.keyID)\"}", payload: claims, algorithm: .ps256)
        #expect(verifier.verify(token: psWithRS256Key, nonce: nil, at: now).code == .unsupportedAlgorithm)
        // RS256 allowed for Apple, but PS256 is not, even with a correct PS256 signature.
        let appleVerifier = try Verifiers.make(Verifiers.apple(), keys: [try SharedTestKeys.rsaPSS()])
        let ps = try SharedTestKeys.rsaPSS().sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        #expect(appleVerifier.verify(token: ps, nonce: nonce, at: now).code == .unsupportedAlgorithm)
    }

    @Test("keys named by the token itself (jwk, jku, x5u, x5c) are never used")
    func embeddedKeys() throws {
        let (key, verifier) = try appleSetup()
        let attacker = try TestKey(.rsa(bits: 2048), keyID: key.keyID)
        let attackerJWK = JSONValue.object(try attacker.jwk())
        for extra: (String, JSONValue) in [
            ("jwk", attackerJWK), ("jku", .string("https://attacker.example/jwks")), ("x5u", .string("https://attacker.example/cert")),
            ("x5c", .array([.string("MIIB")])),
        ] {
            let token = try attacker.sign(ProviderTokens.apple(now: now, rawNonce: nonce), extraHeader: [extra])
            #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .invalidSignature, "\(extra.0)")
        }
    }

    @Test("a crit header naming anything is refused")
    func unknownCrit() throws {
        let (key, verifier) = try appleSetup()
        let token = try key.sign(
            ProviderTokens.apple(now: now, rawNonce: nonce), extraHeader: [("crit", .array([.string("exp")])), ("exp", .integer(1))])
        #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .malformedToken)
        let b64false = try key.sign(
            ProviderTokens.apple(now: now, rawNonce: nonce), extraHeader: [("crit", .array([.string("b64")])), ("b64", .bool(false))])
        #expect(verifier.verify(token: b64false, nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("a stripped or truncated signature is invalid_signature")
    func strippedSignature() throws {
        let (key, verifier) = try appleSetup()
        let parts = segments(try validAppleToken(key))
        #expect(verifier.verify(token: "\(parts[0]).\(parts[1]).", nonce: nonce, at: now).code == .invalidSignature)
        let truncated = Base64URL.encode(try #require(Base64URL.decode(parts[2])).dropLast(3))
        #expect(verifier.verify(token: "\(parts[0]).\(parts[1]).\(truncated)", nonce: nonce, at: now).code == .invalidSignature)
        #expect(verifier.verify(token: "\(parts[0]).\(parts[1])", nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("ECDSA: r = s = 0, DER encoding and wrong lengths are invalid_signature")
    func ecdsaEncodings() throws {
        let ec = try SharedTestKeys.p256()
        let policy = ProviderPolicy.oidc(name: "corp", issuer: "https://appleid.apple.com", audiences: [ProviderTokens.appleAudience])
        let verifier = try Verifiers.make(policy, keys: [ec])
        let token = try ec.sign(ProviderTokens.apple(now: now, rawNonce: nil))
        #expect(verifier.verify(token: token, nonce: nil, at: now).verdict != nil)
        let parts = segments(token)
        let raw = try #require(Base64URL.decode(parts[2]))
        let zero = Base64URL.encode([UInt8](repeating: 0, count: 64))
        #expect(verifier.verify(token: "\(parts[0]).\(parts[1]).\(zero)", nonce: nil, at: now).code == .invalidSignature)
        // The same (r, s) in DER, as some libraries wrongly emit.
        func derInt(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop(while: { $0 == 0 }))
            if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = derInt(raw[0..<32]) + derInt(raw[32..<64])
        let der = Base64URL.encode([0x30, UInt8(body.count)] + body)
        #expect(verifier.verify(token: "\(parts[0]).\(parts[1]).\(der)", nonce: nil, at: now).code == .invalidSignature)
        let long = Base64URL.encode(raw + [0])
        #expect(verifier.verify(token: "\(parts[0]).\(parts[1]).\(long)", nonce: nil, at: now).code == .invalidSignature)
    }

    @Test("an RSA-1024 key is not used: tokens signed with it are unknown_key")
    func weakRSAKey() throws {
        let weak = try TestKey(.rsa(bits: 1024), keyID: "weak-1024")
        let keySet = try KeySet.parse(jwks: Array(try SharedTestKeys.jwks([weak]).utf8))
        #expect(keySet.keys.isEmpty)
        #expect(keySet.skipped.first?.reason.contains("below 2048") == true)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(keySet))
        #expect(verifier.verify(token: try weak.sign(ProviderTokens.apple(now: now, rawNonce: nonce)), nonce: nonce, at: now).code == .unknownKey)
    }

    @Test("an oversized token is token_too_large before any parsing")
    func oversized() throws {
        let (_, verifier) = try appleSetup()
        let huge = String(repeating: "!", count: ProviderPolicy.defaultMaxTokenBytes + 1)
        #expect(verifier.verify(token: huge, nonce: nonce, at: now).code == .tokenTooLarge)
        let justUnder = String(repeating: "!", count: ProviderPolicy.defaultMaxTokenBytes)
        #expect(verifier.verify(token: justUnder, nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("duplicate members in the payload or header are malformed_token, even when signed")
    func duplicateMembers() throws {
        let (key, verifier) = try appleSetup()
        var claims = JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nonce)))
        claims.removeLast()
        claims += ",\"sub\":\"001234.attacker\"}"
        let duplicatePayload = try key.signRaw(header: "{\"alg\":\"RS256\",\"kid\":\"\(key.keyID)\"}", payload: claims)
        #expect(verifier.verify(token: duplicatePayload, nonce: nonce, at: now).code == .malformedToken)
        let duplicateHeader = try key.signRaw(
            header: "{\"alg\":\"RS256\",\"kid\":\"\(key.keyID)\",\"alg\":\"none\"}",
            payload: JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nonce))))
        #expect(verifier.verify(token: duplicateHeader, nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("a refusal quotes at most four of a token's audiences, each capped: thousands of them do not make a token-sized message")
    func manyAudiencesAreNotAllQuoted() throws {
        let (key, verifier) = try appleSetup()
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("aud", .array((0..<1_000).map { .string("a\($0)") }))
        let token = try key.sign(claims)
        let result = verifier.verify(token: token, nonce: nonce, at: now)
        #expect(result.code == .invalidAudience)
        guard case .failure(let error) = result else { return }
        #expect(error.message.contains("\"a3\"") && !error.message.contains("\"a4\"") && error.message.contains("and 996 more"), "\(error.message)")
        #expect(error.message.utf8.count < 300, "\(error.message.utf8.count) bytes")
    }

    @Test("an empty sub, or an empty configured user-id claim, is malformed_token even when signed (fuzz finding)")
    func emptyIdentity() throws {
        let (key, verifier) = try appleSetup()
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("sub", .string(""))
        let result = verifier.verify(token: try key.sign(claims), nonce: nonce, at: now)
        #expect(result.code == .malformedToken)
        if case .failure(let error) = result { #expect(error.message.contains("sub is empty"), "\(error.message)") }
        var policy = Verifiers.apple()
        policy.userIDClaim = "email"
        let byEmail = TokenVerifier(policy: policy, keySource: verifier.keySource)
        claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        #expect(byEmail.verify(token: try key.sign(claims), nonce: nonce, at: now).verdict != nil)
        claims.set("email", .string(""))
        #expect(byEmail.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("a sub or user-id claim no revocation could name (over 1,024 bytes, or with a NUL) is malformed_token (red team 20)")
    func unrevocableIdentity() throws {
        let (key, verifier) = try appleSetup()
        for (name, sub) in [("1,025 bytes", String(repeating: "s", count: 1025)), ("NUL", "001234.ab\u{0}cd.1234")] {
            var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
            claims.set("sub", .string(sub))
            let result = verifier.verify(token: try key.sign(claims), nonce: nonce, at: now)
            #expect(result.code == .malformedToken, "\(name)")
        }
        var longest = ProviderTokens.apple(now: now, rawNonce: nonce)
        longest.set("sub", .string(String(repeating: "s", count: 1024)))
        #expect(verifier.verify(token: try key.sign(longest), nonce: nonce, at: now).verdict != nil)
        var policy = Verifiers.apple()
        policy.userIDClaim = "email"
        let byEmail = TokenVerifier(policy: policy, keySource: verifier.keySource)
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("email", .string("a\u{0}@example.com"))
        #expect(byEmail.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("wrong issuer, audience and tenant")
    func wrongIssuerAudienceTenant() throws {
        let (key, verifier) = try appleSetup()
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("iss", .string("https://appleid.apple.com/"))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidIssuer)
        claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("aud", .array([.string("com.other.app"), .string("com.example.app.evil")]))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidAudience)
        claims.set("aud", .array([.string("com.other.app"), .string(ProviderTokens.appleAudience)]))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).verdict?.audience == ProviderTokens.appleAudience)

        let ms = try Verifiers.make(Verifiers.microsoft(.list([ProviderTokens.workTenant])), keys: [key])
        let otherTenant = "11111111-2222-3333-4444-555555555555"
        let msToken = try key.sign(ProviderTokens.microsoft(now: now, rawNonce: nil, tenant: otherTenant))
        #expect(ms.verify(token: msToken, nonce: nil, at: now).code == .tenantNotAllowed)
    }

    @Test("expiry exactly at and past the leeway; nbf and iat at their edges")
    func timeEdges() throws {
        let (key, verifier) = try appleSetup()
        let claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        let token = try key.sign(claims)
        let exp = now + 86_400
        #expect(verifier.verify(token: token, nonce: nonce, at: exp + 59).verdict != nil)
        #expect(verifier.verify(token: token, nonce: nonce, at: exp + 60).code == .tokenExpired)
        #expect(verifier.verify(token: token, nonce: nonce, at: exp + 3600).code == .tokenExpired)
        // iat in the future: allowed up to the leeway.
        #expect(verifier.verify(token: token, nonce: nonce, at: now - 60).verdict != nil)
        #expect(verifier.verify(token: token, nonce: nonce, at: now - 61).code == .tokenIssuedInFuture)
        // nbf.
        var withNBF = claims
        withNBF.set("nbf", .integer(now + 600))
        withNBF.set("iat", .integer(now - 600))
        let nbfToken = try key.sign(withNBF)
        #expect(verifier.verify(token: nbfToken, nonce: nonce, at: now + 540).verdict != nil)
        #expect(verifier.verify(token: nbfToken, nonce: nonce, at: now + 539).code == .tokenNotYetValid)
    }

    @Test(
        "numeric dates must be in-range JSON numbers",
        arguments: ["\"1767300000\"", "1e300", "-1", "true", "null", "9223372036854775807", "253402300800", "99999999999999999999999"])
    func badNumericDates(exp: String) throws {
        let (key, verifier) = try appleSetup()
        var text = JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nonce)))
        text = text.replacingOccurrences(of: "\"exp\":\(now + 86_400)", with: "\"exp\":\(exp)")
        let token = try key.signRaw(header: "{\"alg\":\"RS256\",\"kid\":\"\(key.keyID)\"}", payload: text)
        #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .malformedToken, "exp \(exp)")
    }

    @Test("a fractional exp is accepted and floored")
    func fractionalExp() throws {
        let (key, verifier) = try appleSetup()
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        claims.set("exp", .number(Double(now) + 100.75))
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).verdict?.expiresAt == now + 100)
    }

    @Test("a missing exp is malformed_token")
    func missingExp() throws {
        let (key, verifier) = try appleSetup()
        var claims = JSONObject()
        for member in ProviderTokens.apple(now: now, rawNonce: nonce).members where member.name != "exp" { claims.set(member.name, member.value) }
        #expect(verifier.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("non-canonical encodings of a valid token are malformed_token")
    func reencoded() throws {
        let (key, verifier) = try appleSetup()
        let token = try validAppleToken(key)
        let parts = segments(token)
        let padded = parts[0] + String(repeating: "=", count: (4 - parts[0].count % 4) % 4)
        let standard = token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        var variants = ["\(padded).\(parts[1]).\(parts[2])", " \(token)", "\(token)\n", "\(parts[0]).\(parts[1]) .\(parts[2])"]
        if standard != token { variants.append(standard) }
        // Non-zero trailing bits: the last character of a segment whose length is 2 or 3 mod 4, nudged up by one.
        let signature = Array(parts[2].utf8)
        if signature.count % 4 != 0, let last = signature.last,
            last == UInt8(ascii: "A") || last == UInt8(ascii: "Q") || last == UInt8(ascii: "g") || last == UInt8(ascii: "w")
        {
            var nudged = signature
            nudged[nudged.count - 1] = last + 1
            variants.append("\(parts[0]).\(parts[1]).\(String(decoding: nudged, as: UTF8.self))")
        }
        for variant in variants {
            #expect(verifier.verify(token: variant, nonce: nonce, at: now).code == .malformedToken, "\(variant.prefix(20))")
        }
    }

    @Test("an answer that cannot decide now has no valid member; every other error says valid: false")
    func retryableAnswersAreNoRejection() {
        for code in ErrorCode.allCases {
            let json = VerificationError(code, "m").json(provider: "apple")
            #expect(json["error"]?.objectValue?["code"] == .string(code.rawValue))
            #expect(json["valid"] == (code.isRetryable ? nil : .bool(false)), "\(code)")
            let bytes = VerificationResult.failure(VerificationError(code, "m")).jsonBytes(provider: nil)
            #expect(String(decoding: bytes, as: UTF8.self).contains("\"valid\"") == !code.isRetryable, "\(code)")
        }
    }
}
