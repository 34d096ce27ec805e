import TokenGuardCore
import TokenGuardService

/// Shorthands for building verifiers in tests.
package enum Verifiers {
    package static let now: Int64 = 1_767_222_000  // 2026-01-01T00:00:00Z: a fixed clock for every test

    package static func make(_ policy: ProviderPolicy, keys: [TestKey]) throws -> TokenVerifier {
        TokenVerifier(policy: policy, keySource: InMemoryKeySource(try SharedTestKeys.keySet(keys)))
    }

    package static func make(_ policy: ProviderPolicy, jwks: String) throws -> TokenVerifier {
        TokenVerifier(policy: policy, keySource: try InMemoryKeySource(jwks: jwks))
    }

    package static func apple() -> ProviderPolicy { .apple(audiences: [ProviderTokens.appleAudience]) }
    package static func facebook() -> ProviderPolicy { .facebookLimited(audiences: [ProviderTokens.facebookAudience]) }
    package static func microsoft(_ tenants: TenantRule = .any) -> ProviderPolicy {
        .microsoft(audiences: [ProviderTokens.microsoftAudience], tenants: tenants)
    }
}

extension Result where Success == Verdict, Failure == VerificationError {
    /// The error code, or nil when the token verified.
    package var code: ErrorCode? {
        if case .failure(let error) = self { return error.code }
        return nil
    }

    package var verdict: Verdict? {
        if case .success(let verdict) = self { return verdict }
        return nil
    }
}

extension Result where Failure == VerificationError {
    package func isFailureWith(_ code: ErrorCode) -> Bool {
        if case .failure(let error) = self { return error.code == code }
        return false
    }
}
