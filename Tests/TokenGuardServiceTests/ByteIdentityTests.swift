import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// A token, nonce, kid and provider name is its bytes (the audit's high finding and its class).
struct ByteIdentityTests {
    let now = Verifiers.now
    let nonce = "byte-identity-nonce"

    /// Variants of `token` that differ in at least one byte: Unicode look-alikes that Swift's `String ==` calls equal,
    /// invisible characters, a trailing NUL, a BOM, combining marks, full-width forms.
    static func variants(of token: String) -> [String] {
        let scalars = Array(token.unicodeScalars)
        var result: [String] = []
        func replacing(_ index: Int, with replacement: String) -> String {
            var copy = scalars
            copy.replaceSubrange(index...index, with: replacement.unicodeScalars)
            var text = ""
            text.unicodeScalars.append(contentsOf: copy)
            return text
        }
        // Every K (U+212A KELVIN SIGN is canonically equivalent to K): one at a time, and all at once.
        let kIndices = scalars.indices.filter { scalars[$0] == "K" }
        for index in kIndices.prefix(8) { result.append(replacing(index, with: "\u{212A}")) }
        result.append(token.replacing("K", with: "\u{212A}"))
        // Invisible or zero-width additions, at the start, the end and inside each segment.
        for extra in ["\u{0}", "\u{200B}", "\u{FEFF}", "\u{2060}", "\u{301}", " ", "\n", "\u{00A0}", "\u{2028}"] {
            result.append(token + extra)
            result.append(extra + token)
            for index in [1, scalars.count / 2, scalars.count - 2] { result.append(replacing(index, with: String(scalars[index]) + extra)) }
        }
        // Full-width look-alikes of a letter in each segment.
        for index in [0, scalars.count / 2, scalars.count - 1] {
            let scalar = scalars[index]
            if scalar.isASCII, let wide = Unicode.Scalar(scalar.value + 0xFEE0) { result.append(replacing(index, with: String(wide))) }
        }
        return result
    }

    @Test("no byte-different token ever gets a cached verdict or skips the replay claim")
    func lookAlikesNeverHitCacheOrStore() async throws {
        let key = try SharedTestKeys.rsa()
        // Sign until the token has a K, so the canonical-equivalence case is exercised (the chance of none is ~1e-7).
        var token = ""
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        for attempt in 0..<50 where !token.contains("K") {
            claims.set("sub", .string("001234.look-alike.\(attempt)"))
            token = try key.sign(claims)
        }
        #expect(token.contains("K"))
        let kelvin = token.replacing("K", with: "\u{212A}")
        #expect(kelvin == token, "Swift's String == calls the Kelvin variant equal: the hazard this test guards against")
        #expect(!kelvin.sameBytes(as: token))

        let store = MemoryReplayStore(capacity: 10_000, clock: .fixed(Verifiers.now))
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: cache)
        let registry = VerifierRegistry(
            verifiers: ["apple": verifier],
            replayGuards: ["apple": ReplayGuard(provider: "apple", store: store, leewaySeconds: 60, clock: .fixed(Verifiers.now))],
            replayStore: store,
            clock: .fixed(Verifiers.now))
        #expect(await registry.verify(provider: "apple", token: token, nonce: nonce, at: nil).verdict != nil)
        #expect(cache.count == 1)
        let claimed = store.count
        let variants = Self.variants(of: token)
        #expect(variants.count > 40)
        for variant in variants {
            #expect(!variant.sameBytes(as: token))
            let direct = verifier.verify(token: variant, nonce: nonce, at: now)
            #expect(direct.code == .malformedToken, "variant \(variant.unicodeScalars.count) scalars: \(String(describing: direct.code))")
            let throughRegistry = await registry.verify(provider: "apple", token: variant, nonce: nonce, at: nil)
            #expect(throughRegistry.verdict == nil)
            let explained = await registry.verify(provider: "apple", token: variant, nonce: nonce, at: nil, explain: true)
            #expect(explained.result.verdict == nil)
        }
        #expect(store.count == claimed, "no variant reached the replay store")
        #expect(cache.count == 1)
        // The original is a replay now, explained or not.
        #expect(await registry.verify(provider: "apple", token: token, nonce: nonce, at: nil).code == .tokenReplayed)
        #expect(await registry.verify(provider: "apple", token: token, nonce: nonce, at: nil, explain: true).result.code == .tokenReplayed)
    }

    @Test(
        "provider names match byte for byte; the configured name is what the verdict and the stores see (a few providers, compared in a list, and many, by hash)",
        arguments: [0, 11])
    func providerNamesAreBytes(others: Int) async throws {
        let key = try SharedTestKeys.rsa()
        var verifiers = ["Kiosk": try Verifiers.make(.apple(name: "Kiosk", audiences: [ProviderTokens.appleAudience]), keys: [key])]
        for index in 0..<others {
            verifiers["p\(index)"] = try Verifiers.make(.apple(name: "p\(index)", audiences: [ProviderTokens.appleAudience]), keys: [key])
        }
        let store = MemoryReplayStore(clock: .fixed(Verifiers.now))
        let registry = VerifierRegistry(
            verifiers: verifiers,
            replayGuards: ["Kiosk": ReplayGuard(provider: "Kiosk", store: store, leewaySeconds: 60, clock: .fixed(Verifiers.now))],
            replayStore: store,
            clock: .fixed(Verifiers.now))
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        #expect("\u{212A}iosk" == "Kiosk", "Swift's String == would find the provider")
        for lookAlike in ["\u{212A}iosk", "Kiosk\u{200B}", "kiosk", "Kiosk\u{0}", "\u{FEFF}Kiosk", "Kios", "p", "p1\u{301}"] {
            #expect(registry.configuredName(lookAlike) == nil)
            #expect(await registry.verify(provider: lookAlike, token: token, nonce: nonce, at: nil).code == .unknownProvider)
            #expect(registry.verifyWithKeysInHand(provider: lookAlike, token: token, nonce: nonce, at: nil)?.code == .unknownProvider)
        }
        #expect(store.count == 0)
        for index in 0..<others {
            let name = "p\(index)"
            #expect(registry.configuredName(name).map { $0.sameBytes(as: name) } == true)
            let verdict = try #require(registry.verifyWithKeysInHand(provider: name, token: token, nonce: nonce, at: nil)?.verdict)
            #expect(verdict.provider.sameBytes(as: name))
        }
        #expect(store.count == 0, "only Kiosk claims tokens")
        let verdict = try #require(registry.verifyWithKeysInHand(provider: "Kiosk", token: token, nonce: nonce, at: nil)?.verdict)
        #expect(verdict.provider.sameBytes(as: "Kiosk"))
        #expect(store.count > 0, "Kiosk's replay guard claimed the token")
        #expect(await registry.verify(provider: "Kiosk", token: token, nonce: nonce, at: nil).code == .tokenReplayed)
    }

    @Test("a kid, a JSON member, an issuer and an audience are compared as bytes")
    func kidsMembersIssuersAudiencesAreBytes() throws {
        let key = try SharedTestKeys.rsa()
        // A kid that is a canonical equivalent of the published one selects no key.
        let published = try TestKey(key, keyID: "Key-1")
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [published])
        let lookAlikeKid = try published.sign(ProviderTokens.apple(now: now, rawNonce: nonce), keyID: "\u{212A}ey-1")
        #expect(verifier.verify(token: lookAlikeKid, nonce: nonce, at: now).code == .unknownKey)
        // JSON member lookup.
        let object = try JSONParser.parseObject(Array("{\"\\u212Aid\": 1, \"Kid\": 2}".utf8))
        #expect(object["Kid"] == .integer(2))
        #expect(object["\u{212A}id"] == .integer(1))
        #expect(JSONValue.string("\u{212A}") != .string("K"))
        // Audience and issuer: a signed token for a look-alike audience is someone else's.
        var claims = ProviderTokens.apple(now: now, rawNonce: nonce)
        let kiosk = try Verifiers.make(.apple(audiences: ["com.example.Kiosk"]), keys: [key])
        claims.set("aud", .string("com.example.\u{212A}iosk"))
        #expect(kiosk.verify(token: try key.sign(claims), nonce: nonce, at: now).code == .invalidAudience)
        claims.set("aud", .string("com.example.Kiosk"))
        #expect(kiosk.verify(token: try key.sign(claims), nonce: nonce, at: now).verdict != nil)
        let corp = try Verifiers.make(.oidc(name: "corp", issuer: "https://Kiosk.example", audiences: ["api"]), keys: [key])
        var oidc = JSONObject([
            ("iss", .string("https://\u{212A}iosk.example")), ("aud", .string("api")), ("sub", .string("s")), ("exp", .integer(now + 60)),
        ])
        #expect(corp.verify(token: try key.sign(oidc), nonce: nil, at: now).code == .invalidIssuer)
        oidc.set("iss", .string("https://Kiosk.example"))
        #expect(corp.verify(token: try key.sign(oidc), nonce: nil, at: now).verdict != nil)
    }

    @Test("ECDSA malleability: the twin signature (r, n - s) is the same sign-in and is refused as a replay")
    func ecdsaTwinIsAReplay() async throws {
        let key = try SharedTestKeys.p256()
        let policy = ProviderPolicy.oidc(name: "corp", issuer: "https://idp.example", audiences: ["api"])
        let store = MemoryReplayStore(clock: .fixed(Verifiers.now))
        let registry = VerifierRegistry(
            verifiers: ["corp": try Verifiers.make(policy, keys: [key])],
            replayGuards: ["corp": ReplayGuard(provider: "corp", store: store, leewaySeconds: 60, clock: .fixed(Verifiers.now))],
            replayStore: store, clock: .fixed(Verifiers.now))
        let claims = JSONObject([
            ("iss", .string("https://idp.example")), ("aud", .string("api")), ("sub", .string("s")), ("exp", .integer(now + 600)),
        ])
        let token = try key.sign(claims)
        let parts = segments(token)
        let signature = try #require(Base64URL.decode(parts[2]))
        #expect(signature.count == 64)
        let twin = Array(signature[..<32]) + Self.subtract(Self.p256Order, Array(signature[32...]))
        let twinToken = parts[0] + "." + parts[1] + "." + Base64URL.encode(twin)
        #expect(twinToken != token)
        // Both verify on their own (OpenSSL accepts high-s), so only the replay key can tell them apart.
        #expect(try Verifiers.make(policy, keys: [key]).verify(token: twinToken, nonce: nil, at: now).verdict != nil)
        #expect(await registry.verify(provider: "corp", token: token, nonce: nil, at: nil).verdict != nil)
        #expect(await registry.verify(provider: "corp", token: twinToken, nonce: nil, at: nil).code == .tokenReplayed)
        // A token re-issued with the same jti is a replay too.
        var withID = claims
        withID.set("jti", .string("token-id-1"))
        #expect(await registry.verify(provider: "corp", token: try key.sign(withID), nonce: nil, at: nil).verdict != nil)
        withID.set("sub", .string("other"))
        #expect(await registry.verify(provider: "corp", token: try key.sign(withID), nonce: nil, at: nil).code == .tokenReplayed)
    }

    static let p256Order: [UInt8] = [
        0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
    ]

    /// a - b for big-endian numbers of the same length, a ≥ b.
    static func subtract(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: a.count)
        var borrow = 0
        for index in stride(from: a.count - 1, through: 0, by: -1) {
            var digit = Int(a[index]) - Int(b[index]) - borrow
            borrow = digit < 0 ? 1 : 0
            if digit < 0 { digit += 256 }
            result[index] = UInt8(digit)
        }
        return result
    }

    @Test("a cached verdict dies with the key that verified it, when two keys share a kid")
    func cacheRecordsTheVerifyingKey() throws {
        let first = try TestKey(try SharedTestKeys.rsa(), keyID: "shared")
        let second = try TestKey(try SharedTestKeys.key("rsa-test-2", .rsa(bits: 2048)), keyID: "shared")
        let both = try SharedTestKeys.keySet([first, second])
        let source = SwappableKeySource(both)
        let cache = VerifiedTokenCache(capacity: 10)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: source, cache: cache)
        let token = try second.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict != nil)
        #expect(cache.count == 1)
        // The key that signed is withdrawn; the other key with the same kid stays published.
        source.set(try SharedTestKeys.keySet([first]))
        #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .invalidSignature)
    }
}

extension TestKey {
    /// The same key under another kid.
    init(_ key: TestKey, keyID: String) throws {
        self.init(signingKey: key.signingKey, keyID: keyID, algorithm: key.algorithm)
    }
}

/// A key source whose keys a test replaces between verifications.
final class SwappableKeySource: KeySource, @unchecked Sendable {
    // @unchecked Sendable: set between verifications of one test task only.
    private var keys: KeySet
    init(_ keys: KeySet) { self.keys = keys }
    func set(_ keys: KeySet) { self.keys = keys }
    func currentKeys() -> Result<KeySet, VerificationError> { .success(keys) }
}
