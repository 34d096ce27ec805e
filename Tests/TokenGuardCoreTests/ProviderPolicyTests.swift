import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// Tokens shaped like each provider's real ones pass their own policy and fail the others'.
struct ProviderPolicyTests {
    let now = Verifiers.now
    let nonce = "5d41402abc4b2a76b9719d911017c592-raw"

    enum Shape: String, CaseIterable, Sendable { case apple, facebook, microsoft }

    func token(_ shape: Shape, key: TestKey) throws -> String {
        switch shape {
        case .apple: try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        case .facebook: try key.sign(ProviderTokens.facebookLimited(now: now, rawNonce: nonce), extraHeader: [("typ", .string("JWT"))])
        case .microsoft: try key.sign(ProviderTokens.microsoft(now: now, rawNonce: nonce), extraHeader: [("typ", .string("JWT"))])
        }
    }

    func verifier(_ shape: Shape, key: TestKey) throws -> TokenVerifier {
        switch shape {
        case .apple: try Verifiers.make(Verifiers.apple(), keys: [key])
        case .facebook: try Verifiers.make(Verifiers.facebook(), keys: [key])
        case .microsoft: try Verifiers.make(Verifiers.microsoft(), jwks: ProviderTokens.microsoftJWKS([key]))
        }
    }

    @Test("each provider's token passes its own policy only", arguments: Shape.allCases)
    func ownPolicyOnly(shape: Shape) throws {
        let key = try SharedTestKeys.rsa()
        let token = try token(shape, key: key)
        for policyShape in Shape.allCases {
            let result = try verifier(policyShape, key: key).verify(token: token, nonce: nonce, at: now)
            if policyShape == shape {
                #expect(result.verdict != nil, "\(shape) under its own policy: \(result)")
            } else {
                #expect(result.verdict == nil, "\(shape) under \(policyShape) must fail")
                #expect(result.code == .invalidIssuer, "\(shape) under \(policyShape): \(result)")
            }
        }
    }

    @Test("Apple verdict: fields, email_verified from a string, SHA-256 nonce")
    func appleVerdict() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try verifier(.apple, key: key)
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce, emailVerifiedAsString: true))
        let verdict = try #require(verifier.verify(token: token, nonce: nonce, at: now).verdict)
        #expect(verdict.provider == "apple")
        #expect(verdict.subject == "001234.0123456789abcdef0123456789abcdef.1234")
        #expect(verdict.userID == verdict.subject)
        #expect(verdict.emailVerified == true)
        #expect(verdict.keyID == key.keyID)
        #expect(verdict.tenantID == nil)
        #expect(verdict.claims["email_verified"] == .string("true"), "claims are echoed as sent")
        let json = JSONWriter.string(.object(verdict.json))
        #expect(json.contains("\"email_verified\":true"))
        // The token's nonce is the hash: passing the hash itself as the raw nonce must fail.
        #expect(verifier.verify(token: token, nonce: SHA256.hexDigest(nonce.utf8), at: now).code == .nonceMismatch)
        #expect(verifier.verify(token: token, nonce: nil, at: now).code == .nonceMissing)
        var falseString = ProviderTokens.apple(now: now, rawNonce: nonce)
        falseString.set("email_verified", .string("false"))
        #expect(verifier.verify(token: try key.sign(falseString), nonce: nonce, at: now).verdict?.emailVerified == false)
        falseString.set("email_verified", .string("yes"))
        #expect(verifier.verify(token: try key.sign(falseString), nonce: nonce, at: now).code == .malformedToken)
        // email_verified without an email vouches for nothing: false (red team round 17), its type still checked.
        func withoutEmail(_ claims: JSONObject) -> JSONObject { JSONObject(claims.members.filter { $0.name != "email" }.map { ($0.name, $0.value) }) }
        var noEmail = withoutEmail(ProviderTokens.apple(now: now, rawNonce: nonce, emailVerifiedAsString: true))
        let unverified = try #require(verifier.verify(token: try key.sign(noEmail), nonce: nonce, at: now).verdict)
        #expect(unverified.email == nil && unverified.emailVerified == false)
        noEmail.set("email", .string(""))
        #expect(verifier.verify(token: try key.sign(noEmail), nonce: nonce, at: now).verdict?.emailVerified == false, "an empty email")
        noEmail = withoutEmail(noEmail)
        noEmail.set("email_verified", .integer(1))
        #expect(verifier.verify(token: try key.sign(noEmail), nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("nonce rules: required, missing from the token, raw versus sha256")
    func nonceRules() throws {
        let key = try SharedTestKeys.rsa()
        let apple = try verifier(.apple, key: key)
        let withoutNonce = try key.sign(ProviderTokens.apple(now: now, rawNonce: nil))
        #expect(apple.verify(token: withoutNonce, nonce: nonce, at: now).code == .nonceMissing)
        #expect(apple.verify(token: withoutNonce, nonce: nil, at: now).code == .nonceMissing, "nonce_required for apple")
        var relaxed = Verifiers.apple()
        relaxed.nonceRequired = false
        let relaxedVerifier = try Verifiers.make(relaxed, keys: [key])
        #expect(relaxedVerifier.verify(token: withoutNonce, nonce: nil, at: now).verdict != nil)
        #expect(relaxedVerifier.verify(token: withoutNonce, nonce: nonce, at: now).code == .nonceMissing)
        // Microsoft compares raw; a SHA-256 of the nonce is not the nonce.
        let ms = try verifier(.microsoft, key: key)
        let msToken = try token(.microsoft, key: key)
        #expect(ms.verify(token: msToken, nonce: nonce, at: now).verdict != nil)
        #expect(ms.verify(token: msToken, nonce: nil, at: now).verdict != nil, "nonce optional for microsoft")
        #expect(ms.verify(token: msToken, nonce: nonce + "x", at: now).code == .nonceMismatch)
        #expect(ms.verify(token: msToken, nonce: String(nonce.dropLast()), at: now).code == .nonceMismatch)
        #expect(ms.verify(token: msToken, nonce: String(repeating: "n", count: 2000), at: now).code == .invalidRequest)
    }

    @Test("Facebook accepts both issuers and nothing else")
    func facebookIssuers() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try verifier(.facebook, key: key)
        for issuer in ["https://www.facebook.com", "https://limited.facebook.com"] {
            let token = try key.sign(ProviderTokens.facebookLimited(now: now, rawNonce: nonce, issuer: issuer))
            #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict?.issuer == issuer)
        }
        for issuer in ["https://facebook.com", "https://m.facebook.com", "http://www.facebook.com", "https://www.facebook.com.evil.example"] {
            let token = try key.sign(ProviderTokens.facebookLimited(now: now, rawNonce: nonce, issuer: issuer))
            #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .invalidIssuer, "\(issuer)")
        }
    }

    @Test("Microsoft: issuer from tid, key issuer honoured, tenants, oid as user id, Graph access tokens refused")
    func microsoftRules() throws {
        let key = try SharedTestKeys.rsa()
        let token = try token(.microsoft, key: key)
        let verdict = try #require(try verifier(.microsoft, key: key).verify(token: token, nonce: nonce, at: now).verdict)
        #expect(verdict.userID == "00000000-0000-0000-66f3-3332eca7ea81")
        #expect(verdict.subject != verdict.userID)
        #expect(verdict.tenantID == ProviderTokens.workTenant)

        // iss must be built from the token's own tid.
        var claims = ProviderTokens.microsoft(now: now, rawNonce: nonce)
        claims.set("tid", .string("11111111-2222-3333-4444-555555555555"))
        let verifierAny = try verifier(.microsoft, key: key)
        #expect(verifierAny.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidIssuer)
        claims.set("tid", .string("../evil"))
        #expect(verifierAny.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidIssuer)

        // A key whose issuer names another tenant does not vouch for this one.
        var jwk = try key.jwk(includeAlgorithm: false)
        jwk.set("issuer", .string("https://login.microsoftonline.com/9188040d-6c67-4c5b-b112-36a304b66dad/v2.0"))
        let pinned = try Verifiers.make(Verifiers.microsoft(), jwks: JSONWriter.string(.object(JSONObject([("keys", .array([.object(jwk)]))]))))
        #expect(pinned.verify(token: token, nonce: nonce, at: now).code == .invalidIssuer)

        // Tenants.
        let consumer = try key.sign(ProviderTokens.microsoft(now: now, rawNonce: nonce, tenant: TenantRule.consumersTenantID))
        let orgs = try Verifiers.make(Verifiers.microsoft(.organizations), jwks: ProviderTokens.microsoftJWKS([key]))
        let consumers = try Verifiers.make(Verifiers.microsoft(.consumers), jwks: ProviderTokens.microsoftJWKS([key]))
        #expect(orgs.verify(token: token, nonce: nonce, at: now).verdict != nil)
        #expect(orgs.verify(token: consumer, nonce: nonce, at: now).code == .tenantNotAllowed)
        #expect(consumers.verify(token: consumer, nonce: nonce, at: now).verdict != nil)
        #expect(consumers.verify(token: token, nonce: nonce, at: now).code == .tenantNotAllowed)

        // Graph access tokens carry a nonce in the header.
        let graph = try key.sign(ProviderTokens.microsoft(now: now, rawNonce: nil), extraHeader: [("nonce", .string("abc"))])
        #expect(verifierAny.verify(token: graph, nonce: nil, at: now).code == .malformedToken)

        // oid is required for the user id.
        var noOID = JSONObject()
        for member in ProviderTokens.microsoft(now: now, rawNonce: nonce).members where member.name != "oid" { noOID.set(member.name, member.value) }
        #expect(verifierAny.verify(token: try key.sign(noOID), nonce: nonce, at: now).code == .malformedToken)
    }

    @Test("tenant rules parse from config values")
    func tenantRuleParsing() {
        #expect(TenantRule.parse(["*"]) == .any)
        #expect(TenantRule.parse(["organizations"]) == .organizations)
        #expect(TenantRule.parse(["consumers"]) == .consumers)
        #expect(TenantRule.parse([ProviderTokens.workTenant.uppercased()]) == .list([ProviderTokens.workTenant]))
        #expect(TenantRule.parse(["*", "organizations"]) == nil)
        #expect(TenantRule.parse(["not-a-guid"]) == nil)
        #expect(TenantRule.parse([]) == nil)
    }

    @Test("EdDSA, ES256/384/512 and PS256 tokens verify under an OIDC policy")
    func otherAlgorithms() throws {
        let keys = [
            try SharedTestKeys.ed25519(), try SharedTestKeys.p256(), try SharedTestKeys.p384(), try SharedTestKeys.p521(),
            try SharedTestKeys.rsaPSS(),
        ]
        let policy = ProviderPolicy.oidc(name: "corp", issuer: "https://appleid.apple.com", audiences: [ProviderTokens.appleAudience])
        let verifier = try Verifiers.make(policy, keys: keys)
        for key in keys {
            let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nil))
            #expect(verifier.verify(token: token, nonce: nil, at: now).verdict?.keyID == key.keyID, "\(key.algorithm)")
        }
        // Without a kid, the one key that fits the algorithm is used; with several that fit, none is guessed.
        let single = try Verifiers.make(policy, keys: [try SharedTestKeys.ed25519()])
        let noKid = try SharedTestKeys.ed25519().signRaw(
            header: "{\"alg\":\"EdDSA\"}", payload: JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nil))))
        #expect(single.verify(token: noKid, nonce: nil, at: now).verdict != nil)
        let two = try Verifiers.make(policy, keys: [try SharedTestKeys.ed25519(), try TestKey(.ed25519, keyID: "ed-2")])
        #expect(two.verify(token: noKid, nonce: nil, at: now).code == .unknownKey)
    }
}

/// Microsoft's `ver` beside a v2.0 issuer is read where it lies when it is plainly "2.0"; every other spelling is read
/// whole and judged as before, and a `ver` that is not a string is refused for that whatever the issuer.
struct MicrosoftVersionClaimTests {
    @Test("ver: plain, escaped, absent, wrong and not a string, beside a matching and a foreign issuer")
    func versionSpellings() throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(Verifiers.microsoft(), jwks: ProviderTokens.microsoftJWKS([key]))
        func code(ver: String, issuer: String? = nil) throws -> ErrorCode? {
            var claims = ProviderTokens.microsoft(now: Verifiers.now, rawNonce: nil)
            claims.set("ver", .string("VERSLOT"))
            if let issuer { claims.set("iss", .string(issuer)) }
            let payload = JSONWriter.string(.object(claims)).replacing("\"ver\":\"VERSLOT\"", with: ver)
            #expect(payload.contains(ver))
            let header = "{\"alg\":\"RS256\",\"kid\":\"\(key.keyID)\",\"typ\":\"JWT\"}"
            return verifier.verify(token: try key.signRaw(header: header, payload: payload), nonce: nil, at: Verifiers.now).code
        }
        #expect(try code(ver: "\"ver\":\"2.0\"") == nil)
        #expect(try code(ver: "\"ver\":\"2\\u002e0\"") == nil)
        #expect(try code(ver: "\"xver\":\"1.0\"") == nil)
        #expect(try code(ver: "\"ver\":\"1.0\"") == .invalidIssuer)
        #expect(try code(ver: "\"ver\":\"2.0 \"") == .invalidIssuer)
        #expect(try code(ver: "\"ver\":\"2.00\"") == .invalidIssuer)
        #expect(try code(ver: "\"ver\":\"2\"") == .invalidIssuer)
        #expect(try code(ver: "\"ver\":2") == .malformedToken)
        #expect(try code(ver: "\"ver\":null") == .malformedToken)
        #expect(try code(ver: "\"ver\":[\"2.0\"]") == .malformedToken)
        let foreign = "https://login.example.com/\(ProviderTokens.workTenant)/v2.0"
        #expect(try code(ver: "\"ver\":2", issuer: foreign) == .malformedToken)
        #expect(try code(ver: "\"ver\":\"2.0\"", issuer: foreign) == .invalidIssuer)
    }
}
