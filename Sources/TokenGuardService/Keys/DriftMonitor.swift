import Logging
import Metrics
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardSync

/// What a provider publishes, watched for change (contract: Providers report, `drift`): its discovery `issuer`,
/// `jwks_uri` and `id_token_signing_alg_values_supported`, and the key types and algorithms in its JWKS. A change
/// is logged, counted in `tokenguard_provider_drift_total{provider,what}` and listed — and changes nothing that is
/// trusted (Apple's discovery issuer moved in 2025 while its tokens did not).
package final class DriftMonitor: Sendable {
    package struct Change: Sendable, Equatable {
        package let what: String
        package let from: String
        package let to: String
        package let seenAt: Int64
    }

    package let provider: String
    private let state = Locked<(observed: [String: String], changes: [Change])>(([:], []))
    private let logger = Logger(label: "tokenguard.drift")
    /// The most recent changes kept for the report.
    static let maximumChanges = 32

    package init(provider: String) { self.provider = provider }

    /// Records what was seen; a value different from the last one seen is a change.
    package func observe(_ what: String, _ value: String, at seconds: Int64) {
        // Bounded by bytes (a character can be one letter and thousands of combining marks).
        let bounded = String(decoding: value.utf8.prefix(512), as: UTF8.self)
        let previous: String? = state.withLock { state in
            let previous = state.observed[what]
            state.observed[what] = bounded
            if let previous, !previous.sameBytes(as: bounded) {
                state.changes.append(Change(what: what, from: previous, to: bounded, seenAt: seconds))
                if state.changes.count > Self.maximumChanges { state.changes.removeFirst(state.changes.count - Self.maximumChanges) }
            }
            return previous
        }
        guard let previous, !previous.sameBytes(as: bounded) else { return }
        Counter(label: "tokenguard_provider_drift_total", dimensions: [("provider", provider), ("what", what)]).increment()
        logger.warning(
            "provider drift: what it publishes changed (nothing trusted changes)",
            metadata: ["provider": "\(provider)", "what": "\(what)", "from": "\(previous)", "to": "\(bounded)"])
    }

    package var changes: [Change] { state.withLock { $0.changes } }

    /// The discovery document's watched members.
    package func observe(discovery document: JSONObject, at seconds: Int64) {
        observe("issuer", document["issuer"]?.stringValue ?? "(none)", at: seconds)
        observe("jwks_uri", document["jwks_uri"]?.stringValue ?? "(none)", at: seconds)
        let algorithms =
            document["id_token_signing_alg_values_supported"]?.arrayValue?.compactMap(\.stringValue).sorted {
                $0.utf8.lexicographicallyPrecedes($1.utf8)
            } ?? []
        observe("algorithms", algorithms.joined(separator: ","), at: seconds)
    }

    /// The JWKS's key types and algorithms (`RSA/RS256`, one entry per distinct pair, sorted).
    package func observe(keys: KeySet, at seconds: Int64) {
        let kinds = Set(keys.keys.map { "\($0.publicKey.keyType)/\($0.algorithm?.rawValue ?? "-")" })
        observe("key_types", kinds.sorted().joined(separator: ","), at: seconds)
    }
}
