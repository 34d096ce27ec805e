import Dispatch
import Metrics
import TokenGuardCore
import TokenGuardService

/// Verification metrics: `tokenguard_verifications_total{provider,outcome}`, `tokenguard_verification_duration_seconds
/// {provider}` and `tokenguard_forward_auth_total{provider,mode,outcome}`, recorded without a lock or an allocation.
///
/// Every handle is made when the service starts, for the configured providers and "unknown": a client's provider name
/// is never a label value, so the label set is fixed, and recording a verification is finding its provider's slot
/// (names compared byte for byte, among a handful) and adding to atomics.
final class ServiceMetrics: Sendable {
    struct Slot: Sendable {
        let provider: String
        let outcomes: [Counter]  // indexed like `outcomeNames`
        let duration: LatencyHistogram
        let forwardAuthMode: ForwardAuthPolicy.Mode
        let forwardAuthOutcomes: [Counter]
    }

    /// "valid", then every error code.
    static let outcomeNames = ["valid"] + errorCodes.map(\.rawValue)
    private static let errorCodes = Array(ErrorCode.allCases)
    static let durationName = "tokenguard_verification_duration_seconds"

    private let slots: [Slot]
    private let unknownSlot: Int
    /// Forward-auth answers for names that are not configured: 404s, counted as `enforce` whatever mode a provider
    /// configured as "unknown" has.
    private let unknownForwardAuthOutcomes: [Counter]
    /// `tokenguard_answered_in_pipeline_total{endpoint}`: requests answered on the event loop by ``VerifyOnTheEventLoop``.
    private let answeredInPipeline: (verify: Counter, forwardAuth: Counter)

    /// - Parameter providers: each configured provider with its forward-auth mode.
    init(providers: [(name: String, forwardAuthMode: ForwardAuthPolicy.Mode)]) {
        func slot(_ name: String, _ mode: ForwardAuthPolicy.Mode) -> Slot {
            Slot(
                provider: name,
                outcomes: Self.outcomeNames.map {
                    Counter(label: "tokenguard_verifications_total", dimensions: [("provider", name), ("outcome", $0)])
                },
                duration: LatencyHistogram(),
                forwardAuthMode: mode,
                forwardAuthOutcomes: Self.outcomeNames.map {
                    Counter(label: "tokenguard_forward_auth_total", dimensions: [("provider", name), ("mode", mode.rawValue), ("outcome", $0)])
                })
        }
        var slots = providers.map { slot($0.name, $0.forwardAuthMode) }
        unknownForwardAuthOutcomes = Self.outcomeNames.map {
            Counter(label: "tokenguard_forward_auth_total", dimensions: [("provider", "unknown"), ("mode", "enforce"), ("outcome", $0)])
        }
        // A provider configured as "unknown" shares its series with unknown names rather than repeating them.
        if let configured = slots.firstIndex(where: { $0.provider.sameBytes(as: "unknown") }) {
            unknownSlot = configured
        } else {
            unknownSlot = slots.count
            slots.append(slot("unknown", .enforce))
        }
        self.slots = slots
        func pipeline(_ endpoint: String) -> Counter { Counter(label: "tokenguard_answered_in_pipeline_total", dimensions: [("endpoint", endpoint)]) }
        answeredInPipeline = (pipeline("verify"), pipeline("forward_auth"))
    }

    func countAnsweredInPipeline(forwardAuth: Bool) {
        (forwardAuth ? answeredInPipeline.forwardAuth : answeredInPipeline.verify).increment()
    }

    convenience init(registry: VerifierRegistry) {
        self.init(providers: registry.providerNames.map { ($0, registry.forwardAuthPolicy($0).mode) })
    }

    static func outcomeIndex(_ result: VerificationResult) -> Int {
        switch result {
        case .success: 0
        case .failure(let error): 1 + (errorCodes.firstIndex(of: error.code) ?? 0)
        }
    }

    /// The slot of a configured provider, byte for byte; "unknown" for any other name.
    func slot(_ provider: String) -> Slot { configuredSlot(provider) ?? slots[unknownSlot] }

    private func configuredSlot(_ provider: String) -> Slot? {
        for slot in slots where slot.provider.sameBytes(as: provider) { return slot }
        return nil
    }

    func record(provider: String, result: VerificationResult, startedAt: DispatchTime) {
        let slot = slot(provider)
        slot.outcomes[Self.outcomeIndex(result)].increment()
        slot.duration.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- startedAt.uptimeNanoseconds)
    }

    /// A forward-auth answer, counted under the provider's configured mode (names not configured: `enforce`).
    func countForwardAuth(provider: String, result: VerificationResult) {
        let outcomes = configuredSlot(provider)?.forwardAuthOutcomes ?? unknownForwardAuthOutcomes
        outcomes[Self.outcomeIndex(result)].increment()
    }

    /// The duration histograms in the Prometheus text format, to follow the registry's own text in `/metrics`.
    func durationExposition() -> [UInt8] {
        var text = Array("# TYPE \(Self.durationName) histogram\n".utf8)
        for slot in slots { slot.duration.append(to: &text, name: Self.durationName, labels: [("provider", slot.provider)]) }
        return text
    }
}
