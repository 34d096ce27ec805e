import Dispatch
import Metrics
import TokenGuardCore
import TokenGuardService
import TokenGuardSync

/// Verification metrics: counts by provider and outcome code (a bounded label set), and latency.
///
/// The metric handles are made once per (provider, outcome) and kept: making a handle costs a lookup in the metrics
/// registry under its lock, with the labels hashed and compared, on every request otherwise.
enum ServiceMetrics {
    struct Handles {
        let outcomes: [Counter]  // indexed like `outcomeNames`
        let duration: Metrics.Timer
    }

    /// "valid", then every error code.
    static let outcomeNames = ["valid"] + ErrorCode.allCases.map(\.rawValue)
    private static let handles = Locked<[String: Handles]>([:])

    static func outcomeIndex(_ result: VerificationResult) -> Int {
        switch result {
        case .success: 0
        case .failure(let error): 1 + (ErrorCode.allCases.firstIndex(of: error.code) ?? 0)
        }
    }

    static func handles(for provider: String) -> Handles {
        if let known = handles.withLock({ $0[provider] }) { return known }
        let made = Handles(
            outcomes: outcomeNames.map { Counter(label: "tokenguard_verifications_total", dimensions: [("provider", provider), ("outcome", $0)]) },
            duration: Metrics.Timer(label: "tokenguard_verification_duration_seconds", dimensions: [("provider", provider)]))
        return handles.withLock { table in
            if let existing = table[provider] { return existing }
            table[provider] = made
            return made
        }
    }

    static func record(provider: String, result: VerificationResult, startedAt: DispatchTime) {
        // Unknown provider names are client input: never a label value, so the label set stays bounded.
        let isUnknown: Bool
        if case .failure(let error) = result, error.code == .unknownProvider { isUnknown = true } else { isUnknown = false }
        let handles = handles(for: isUnknown ? "unknown" : provider)
        handles.outcomes[outcomeIndex(result)].increment()
        handles.duration.recordNanoseconds(Int64(DispatchTime.now().uptimeNanoseconds - startedAt.uptimeNanoseconds))
    }
}

/// `tokenguard_forward_auth_total{provider,mode,outcome}`, with the handles kept like ``ServiceMetrics``'.
enum ForwardAuthMetrics {
    private static let counters = Locked<[String: [Counter]]>([:])

    static func count(provider: String, mode: ForwardAuthPolicy.Mode, result: VerificationResult) {
        let key = provider + "\u{0}" + mode.rawValue
        var list = counters.withLock { $0[key] }
        if list == nil {
            let made = ServiceMetrics.outcomeNames.map {
                Counter(label: "tokenguard_forward_auth_total", dimensions: [("provider", provider), ("mode", mode.rawValue), ("outcome", $0)])
            }
            list = counters.withLock { table in
                if let existing = table[key] { return existing }
                table[key] = made
                return made
            }
        }
        list?[ServiceMetrics.outcomeIndex(result)].increment()
    }
}
