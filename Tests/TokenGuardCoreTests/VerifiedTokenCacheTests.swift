import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// The verified-token cache: hits skip the signature, but never skip expiry, nonce or key withdrawal.
struct VerifiedTokenCacheTests {
    let now = Verifiers.now
    let nonce = "cache-raw-nonce"

    /// A key source whose published keys the test can swap.
    final class SwappableKeys: KeySource, @unchecked Sendable {
        // @unchecked Sendable: the tests swap `keys` between verifications on one task only.
        var keys: KeySet
        init(_ keys: KeySet) { self.keys = keys }
        func currentKeys() -> Result<KeySet, VerificationError> { .success(keys) }
    }

    /// `token` verified (and cached) under `before`, then the keys changed to `after`: a fresh check says `expected`,
    /// and the cached verifier must say the same.
    func expectCacheFollows(
        _ token: String, policy: ProviderPolicy = Verifiers.apple(), from before: KeySet, to after: KeySet, fresh expected: ErrorCode,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let source = SwappableKeys(before)
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: policy, keySource: source, cache: cache)
        #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict != nil, sourceLocation: sourceLocation)
        #expect(cache.count == 1, sourceLocation: sourceLocation)
        source.keys = after
        let fresh = TokenVerifier(policy: policy, keySource: source).verify(token: token, nonce: nonce, at: now)
        #expect(fresh.code == expected, sourceLocation: sourceLocation)
        #expect(
            verifier.verify(token: token, nonce: nonce, at: now).code == fresh.code, "the cached verdict outlived the change",
            sourceLocation: sourceLocation)
    }

    @Test("a cached token still gets its nonce checked and its expiry re-checked on every hit")
    func hitsAreRechecked() throws {
        let key = try SharedTestKeys.rsa()
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: cache)
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let first = try #require(verifier.verify(token: token, nonce: nonce, at: now).verdict)
        #expect(cache.count == 1)
        #expect(verifier.verify(token: token, nonce: nonce, at: now + 10).verdict == first)
        #expect(verifier.verify(token: token, nonce: "other", at: now).code == .nonceMismatch)
        #expect(verifier.verify(token: token, nonce: nil, at: now).code == .nonceMissing)
        #expect(verifier.verify(token: token, nonce: nonce, at: now + 86_400 + 60).code == .tokenExpired)
        #expect(cache.count == 0, "an expired entry is dropped")
    }

    @Test("a rejected token is never cached; a near-identical token is not a hit")
    func onlyPositiveAndExact() throws {
        let key = try SharedTestKeys.rsa()
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: cache)
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        _ = verifier.verify(token: token, nonce: "wrong", at: now)
        #expect(cache.count == 0)
        #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict != nil)
        var forged = Array(token.utf8)
        forged[forged.count - 5] = forged[forged.count - 5] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(verifier.verify(token: String(decoding: forged, as: UTF8.self), nonce: nonce, at: now).verdict == nil)
    }

    @Test("an entry is dropped when its key leaves the key set")
    func keyWithdrawn() throws {
        let key = try SharedTestKeys.rsa()
        let other = try SharedTestKeys.p256()
        let source = SwappableKeys(try SharedTestKeys.keySet([key, other]))
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: source, cache: cache)
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict != nil)
        source.keys = try SharedTestKeys.keySet([other])
        #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .unknownKey)
        #expect(cache.count == 0)
    }

    @Test("an entry is dropped when its key is republished with another kid or alg: a hit answers what a full check would")
    func keyRepublishedDifferently() throws {
        let key = try SharedTestKeys.rsa()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        for (renamed, expected) in [
            (TestKey(signingKey: key.signingKey, keyID: key.keyID + "-renamed", algorithm: .rs256), ErrorCode.unknownKey),
            (TestKey(signingKey: key.signingKey, keyID: key.keyID, algorithm: .rs384), .unsupportedAlgorithm),
        ] {
            var policy = Verifiers.apple()
            policy.algorithms = [.rs256, .rs384]
            // The same key material, published differently.
            expectCacheFollows(
                token, policy: policy, from: try SharedTestKeys.keySet([key]), to: try SharedTestKeys.keySet([renamed]), fresh: expected)
        }
    }

    @Test("a key republished under a canonically equivalent kid of other bytes is another key: its cached verdicts die")
    func keyRepublishedUnderEquivalentKid() throws {
        let key = try SharedTestKeys.rsa()
        // The same two combining marks in either order: equal as Strings (canonical ordering), not as bytes.
        let original = TestKey(signingKey: key.signingKey, keyID: "kid-a\u{301}\u{316}", algorithm: .rs256)
        let reordered = TestKey(signingKey: key.signingKey, keyID: "kid-a\u{316}\u{301}", algorithm: .rs256)
        #expect(original.keyID == reordered.keyID && !original.keyID.sameBytes(as: reordered.keyID))
        let token = try original.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let source = SwappableKeys(try SharedTestKeys.keySet([original]))
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: source, cache: cache)
        #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict != nil)
        // The same keys in a new set (a refresh that changed nothing): the entry is kept.
        source.keys = try SharedTestKeys.keySet([original])
        #expect(verifier.verify(token: token, nonce: nonce, at: now).verdict != nil)
        #expect(cache.count == 1)
        source.keys = try SharedTestKeys.keySet([reordered])
        #expect(TokenVerifier(policy: Verifiers.apple(), keySource: source).verify(token: token, nonce: nonce, at: now).code == .unknownKey)
        #expect(verifier.verify(token: token, nonce: nonce, at: now).code == .unknownKey, "the cached verdict outlived the change")
        #expect(cache.count == 0)
    }

    @Test("a cached token without a kid dies when another key that fits it is published: a hit answers what a full check would")
    func tokenWithoutKidAfterAnotherKeyAppears() throws {
        let key = try SharedTestKeys.rsa()
        let other = try TestKey(.rsa(bits: 2048), keyID: "another", algorithm: .rs256)
        let header = #"{"alg":"RS256"}"#
        let token = try key.signRaw(header: header, payload: JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nonce))))
        // One key alone fits a token without a kid; with two, none does.
        expectCacheFollows(token, from: try SharedTestKeys.keySet([key]), to: try SharedTestKeys.keySet([key, other]), fresh: .unknownKey)
    }

    @Test("an empty kid or issuer is not an absent one: a key republished from one to the other ends its cached verdicts")
    func emptyIsNotAbsent() throws {
        let key = try SharedTestKeys.rsa()
        func keySet(kid: String?, issuer: String?) throws -> KeySet {
            var jwk = try key.jwk()
            var members = jwk.members.filter { !$0.name.sameBytes(as: "kid") }
            if let kid { members.append(("kid", .string(kid))) }
            if let issuer { members.append(("issuer", .string(issuer))) }
            jwk = JSONObject(members)
            return try KeySet.parse(jwks: JSONWriter.bytes(.object(JSONObject([("keys", .array([.object(jwk)]))]))))
        }
        let bindings = try [keySet(kid: nil, issuer: nil), keySet(kid: "", issuer: nil), keySet(kid: nil, issuer: ""), keySet(kid: "", issuer: "")]
            .map { $0.keys[0].binding }
        #expect(Set(bindings).count == 4)
        // A token naming the empty kid, cached, then its key republished with no kid: a fresh check finds no key.
        let token = try key.signRaw(
            header: #"{"alg":"RS256","kid":""}"#, payload: JSONWriter.string(.object(ProviderTokens.apple(now: now, rawNonce: nonce))))
        expectCacheFollows(token, from: try keySet(kid: "", issuer: nil), to: try keySet(kid: nil, issuer: nil), fresh: .unknownKey)
    }

    @Test("a cached token's key, once several keys share its kid, answers as a fresh check would: the first that verifies decides")
    func keyNoLongerAloneUnderItsKid() throws {
        let key = try SharedTestKeys.rsa()
        let tenant = "9188040d-6c67-4c5b-b112-36a304b66dad"
        func entry(issuer: String) throws -> JSONValue {
            var jwk = try key.jwk(includeAlgorithm: false)
            jwk.set("issuer", .string(issuer))
            return .object(jwk)
        }
        func keySet(_ entries: [JSONValue]) throws -> KeySet {
            try KeySet.parse(jwks: JSONWriter.bytes(.object(JSONObject([("keys", .array(entries))]))))
        }
        let template = try entry(issuer: "https://login.microsoftonline.com/{tenantid}/v2.0")
        let otherTenant = try entry(issuer: "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000001/v2.0")
        let token = try key.sign(ProviderTokens.microsoft(now: now, rawNonce: nonce, tenant: tenant))
        var policy = Verifiers.microsoft()
        policy.algorithms = [.rs256]
        // The same key, first bound to another tenant: a fresh check verifies with that entry and refuses the issuer.
        expectCacheFollows(token, policy: policy, from: try keySet([template]), to: try keySet([otherTenant, template]), fresh: .invalidIssuer)
    }

    @Test("bounded: least recently used entries are evicted; capacity 0 disables")
    func bounded() throws {
        let key = try SharedTestKeys.ed25519()
        let policy = ProviderPolicy.oidc(name: "corp", issuer: "https://appleid.apple.com", audiences: [ProviderTokens.appleAudience])
        let cache = VerifiedTokenCache(capacity: 16)  // one entry per shard
        let verifier = TokenVerifier(policy: policy, keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: cache)
        for index in 0..<200 {
            var claims = ProviderTokens.apple(now: now, rawNonce: nil)
            claims.set("sub", .string("user-\(index)"))
            _ = verifier.verify(token: try key.sign(claims), nonce: nil, at: now)
        }
        #expect(cache.count <= 16)
        let disabled = TokenVerifier(
            policy: policy, keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: VerifiedTokenCache(capacity: 0))
        #expect(disabled.cache == nil)
    }

    @Test("verification at a past time does not use the cache")
    func historicalBypasses() throws {
        let key = try SharedTestKeys.rsa()
        let cache = VerifiedTokenCache(capacity: 100)
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])), cache: cache)
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        #expect(verifier.verify(token: token, nonce: nonce, at: now, historical: true).verdict != nil)
        #expect(cache.count == 0)
    }
}
