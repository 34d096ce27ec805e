import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardSync

/// A bounded cache of opaque-token answers, so a busy sidecar does not spend the app's GitHub or Graph rate limit
/// on the same token again and again.
///
/// Keyed by SHA-256 of the token (the token itself is never stored, logged or used as a metric label).
/// Positive answers live `positiveTTL` (default 60 s) but never past the token's own expiry; `token_inactive`
/// answers live only `negativeTTL` (a few seconds), so a newly issued token is not refused for long;
/// `keys_unavailable` is never cached. Least recently inserted entries are evicted first when full.
package final class OpaqueVerdictCache: Sendable {
    struct Entry {
        let result: VerificationResult
        let expiresAt: Double
    }

    struct State {
        var entries: [[UInt8]: Entry] = [:]
        var order: [[UInt8]] = []
        var orderStart = 0
    }

    package let capacity: Int
    package let positiveTTL: Double
    package let negativeTTL: Double
    private let state = Locked(State())

    package init(capacity: Int = 10_000, positiveTTL: Double = 60, negativeTTL: Double = 3) {
        self.capacity = capacity
        self.positiveTTL = positiveTTL
        self.negativeTTL = negativeTTL
    }

    static func key(_ token: String) -> [UInt8] { SHA256.hash(token.utf8) }

    package func lookup(_ token: String, now: Double) -> VerificationResult? {
        guard capacity > 0 else { return nil }
        let key = Self.key(token)
        return state.withLock { state in
            guard let entry = state.entries[key] else { return nil }
            if entry.expiresAt <= now {
                state.entries[key] = nil
                return nil
            }
            return entry.result
        }
    }

    package func store(_ token: String, _ result: VerificationResult, now: Double) {
        guard capacity > 0 else { return }
        let expiresAt: Double
        switch result {
        case .success(let verdict):
            expiresAt = min(now + positiveTTL, verdict.expiresAt.map(Double.init) ?? .infinity)
        case .failure(let error) where error.code == .tokenInactive:
            expiresAt = now + negativeTTL
        case .failure:
            return
        }
        guard expiresAt > now else { return }
        let key = Self.key(token)
        state.withLock { state in
            if state.entries.updateValue(Entry(result: result, expiresAt: expiresAt), forKey: key) == nil {
                state.order.append(key)
            }
            while state.entries.count > capacity, state.orderStart < state.order.count {
                state.entries[state.order[state.orderStart]] = nil
                state.orderStart += 1
            }
            if state.orderStart > 4096 && state.orderStart * 2 > state.order.count {
                state.order.removeFirst(state.orderStart)
                state.orderStart = 0
            }
        }
    }
}
