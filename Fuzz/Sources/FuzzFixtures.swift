import Foundation
import TokenGuardService

@testable import TokenGuardCore

/// What the targets verify against: the sample configuration and its pinned JWKS files in `examples/`
/// (scripts/fuzz.sh runs from the repository root), at the time the sample tokens were used.
enum FuzzFixtures {
    /// 2026-01-01T00:01:00Z, when the sample tokens were valid.
    static let now: Int64 = 1_767_222_060
    /// The raw nonce the sample tokens were minted with.
    static let sampleNonce = "d8f1f8c0-sample-raw-nonce"

    static let configuration: Configuration = {
        do {
            return try Configuration.load(path: "examples/tokenguard.yaml", environment: [:])
        } catch {
            fatalError("tokenguard-fuzz runs from the repository root (examples/tokenguard.yaml): \(error)")
        }
    }()

    /// Verifiers for the sample providers, with keys from their pinned JWKS files and a pinned clock.
    static let registry = VerifierRegistry(configuration: configuration, clock: .fixed(now))

    /// Verifiers in a fixed order, so a given input takes the same path every run.
    static let verifiers: [(name: String, verifier: TokenVerifier)] = registry.verifiers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }

    /// The raw nonces an input is tried with: none, the samples' own, and another.
    static let nonces: [String?] = [nil, sampleNonce, "not-the-sample-nonce"]
}

extension Result where Success == Verdict, Failure == VerificationError {
    /// The error code, or nil for a verdict.
    var code: ErrorCode? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}
