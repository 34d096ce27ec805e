import Dispatch
import Metrics
import TokenGuardCore
import TokenGuardService

/// Verification metrics: counts by provider and outcome code (a bounded label set), and latency.
enum ServiceMetrics {
    static func record(provider: String, result: VerificationResult, startedAt: DispatchTime) {
        let outcome: String
        switch result {
        case .success: outcome = "valid"
        case .failure(let error): outcome = error.code.rawValue
        }
        // Unknown provider names are client input: never a label value, so the label set stays bounded.
        let label = outcome == ErrorCode.unknownProvider.rawValue ? "unknown" : provider
        Counter(label: "tokenguard_verifications_total", dimensions: [("provider", label), ("outcome", outcome)]).increment()
        Metrics.Timer(label: "tokenguard_verification_duration_seconds", dimensions: [("provider", label)])
            .recordNanoseconds(Int64(DispatchTime.now().uptimeNanoseconds - startedAt.uptimeNanoseconds))
    }
}
