import Testing
import TokenGuardCore
import TokenGuardSync
import TokenGuardTestSupport

/// What the verifier asks of its key source after a miss.
struct KeysAfterMissTests {
    /// No keys for the first `unavailableReads` reads, the keys after; counts the fetches asked for.
    final class ArrivingKeys: KeySource {
        let keys: KeySet
        let unavailableReads: Int
        let reads = Locked(0)
        let fetchesAskedFor = Locked(0)

        init(_ keys: KeySet, unavailableReads: Int) {
            self.keys = keys
            self.unavailableReads = unavailableReads
        }

        func currentKeys() -> Result<KeySet, VerificationError> {
            let read = reads.withLock { count in
                count += 1
                return count
            }
            return read <= unavailableReads ? .failure(VerificationError(.keysUnavailable, "not fetched yet")) : .success(keys)
        }

        func keysAfterMiss(keyID: String?) async -> Result<KeySet, VerificationError>? {
            fetchesAskedFor.withLock { $0 += 1 }
            return .success(keys)
        }
    }

    @Test("keys that arrive while the first attempt runs are used without asking for another fetch, with or without a kid")
    func keysArrivingDuringTheFirstAttempt() async throws {
        let key = try SharedTestKeys.rsa()
        let claims = JSONWriter.string(.object(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n")))
        let withKeyID = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        let withoutKeyID = try key.signRaw(header: #"{"alg":"RS256"}"#, payload: claims)
        for token in [withKeyID, withoutKeyID] {
            // Two reads see no keys (the one before the attempt, the attempt's own); the keys are there after.
            let source = ArrivingKeys(try SharedTestKeys.keySet([key]), unavailableReads: 2)
            let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: source)
            let result = await verifier.verifyRefreshingKeys(token: token, nonce: "n", at: Verifiers.now)
            #expect((try? result.get()) != nil, "\(result)")
            #expect(source.fetchesAskedFor.withLock { $0 } == 0)
        }
        // Keys that did not change since the first attempt: the source is asked (and may fetch).
        let unchanged = ArrivingKeys(try SharedTestKeys.keySet([key]), unavailableReads: 3)
        let result = await TokenVerifier(policy: Verifiers.apple(), keySource: unchanged).verifyRefreshingKeys(
            token: withoutKeyID, nonce: "n", at: Verifiers.now)
        #expect((try? result.get()) != nil, "\(result)")
        #expect(unchanged.fetchesAskedFor.withLock { $0 } == 1)
    }

    /// A tenant name whose authority cannot be reached: every tenant not in the list is undecided.
    struct UnreachableTenantNames: TenantDirectory {
        func check(tenantID: String) -> VerificationError? { VerificationError(.keysUnavailable, "tenant names not resolved yet") }
    }

    @Test("keys_unavailable for a tenant name not resolved yet, with keys in hand, asks for no fetch and is answered as is")
    func undecidedTenantAsksForNoKeys() async throws {
        let key = try SharedTestKeys.rsa()
        var policy = Verifiers.microsoft(.list(["00000000-0000-0000-0000-000000000001"]))
        policy.tenantDirectory = UnreachableTenantNames()
        let source = ArrivingKeys(try KeySet.parse(jwks: Array(try ProviderTokens.microsoftJWKS([key]).utf8)), unavailableReads: 0)
        let token = try key.sign(ProviderTokens.microsoft(now: Verifiers.now, rawNonce: "n"))
        let result = await TokenVerifier(policy: policy, keySource: source).verifyRefreshingKeys(token: token, nonce: "n", at: Verifiers.now)
        #expect(result.isFailureWith(.keysUnavailable), "\(result)")
        #expect(source.fetchesAskedFor.withLock { $0 } == 0)
        // Only the key reads of one attempt and the one before it: the token was not verified again.
        #expect(source.reads.withLock { $0 } == 2)
    }
}
