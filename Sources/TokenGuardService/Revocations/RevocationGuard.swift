import Logging
import Metrics
import TokenGuardCore
import TokenGuardSync

/// Applies revocations to every verification (verify, batch, forward-auth, cached verdicts alike) from an in-memory
/// snapshot of the store, refreshed in the background. Fails closed: when the store has not been read for longer
/// than `maximumStaleness`, no token is accepted (`revocation_store_unavailable`, 503).
package final class RevocationGuard: Sendable {
    private struct State {
        var set = RevocationSet()
        var version: String? = nil
        /// When the store last answered (wall-clock seconds); nil before the first read.
        var readAt: Double? = nil
        var lastError: String? = nil
    }

    package let store: any RevocationStore
    package let maximumStaleness: Double
    private let state = Locked(State())
    private let clock: WallClock
    private let logger: Logger

    package init(
        store: any RevocationStore, maximumStaleness: Double, clock: WallClock = .system, logger: Logger = Logger(label: "tokenguard.revocations")
    ) {
        self.store = store
        self.maximumStaleness = maximumStaleness
        self.clock = clock
        self.logger = logger
    }

    /// The result with revocations applied: a valid verdict of a revoked subject becomes `token_revoked`; with a stale
    /// snapshot every valid verdict becomes `revocation_store_unavailable`. Rejections pass through unchanged.
    package func check(_ result: VerificationResult) -> VerificationResult {
        guard case .success(let verdict) = result else { return result }
        let (set, readAt) = state.withLock { ($0.set, $0.readAt) }
        guard let readAt, clock.now - readAt <= maximumStaleness else {
            return .failure(
                VerificationError(
                    .revocationStoreUnavailable, "revocations could not be read for over \(Int(maximumStaleness)) s",
                    retryAfterSeconds: 1))
        }
        if let error = set.check(verdict) {
            Counter(label: "tokenguard_revoked_tokens_total", dimensions: [("provider", verdict.provider)]).increment()
            return .failure(error)
        }
        return result
    }

    /// Reads the store's version and, when it changed, every revocation.
    package func refresh() async {
        do {
            let version = try await store.version()
            if version != state.withLock({ $0.version }) {
                let set = RevocationSet(try await store.all())
                state.withLock {
                    $0.set = set
                    $0.version = version
                }
                Gauge(label: "tokenguard_revocations").record(set.count)
            }
            state.withLock {
                $0.readAt = clock.now
                $0.lastError = nil
            }
        } catch {
            // A refresh stopped because its task was cancelled (the run is ending) is no failure to read.
            if error is CancellationError || Task.isCancelled { return }
            let first = state.withLock { state -> Bool in
                defer { state.lastError = "\(error)" }
                return state.lastError == nil
            }
            if first { logger.error("revocations cannot be read", metadata: ["error": "\(error)"]) }
        }
    }

    /// Polls the store until cancelled, a few times within each staleness window.
    package func runRefreshLoop() async {
        let interval = min(1.0, max(0.05, maximumStaleness / 5))
        while !Task.isCancelled {
            await refresh()
            try? await Task.sleep(for: .seconds(interval))
        }
    }

    /// Records a revocation and makes it effective in this process at once.
    package func record(_ revocation: Revocation, onlyLater: Bool = false) async throws {
        try await store.put(revocation, onlyLater: onlyLater)
        await refresh()
    }

    package func remove(provider: String, subject: String) async throws -> Bool {
        let removed = try await store.delete(provider: provider, subject: subject)
        await refresh()
        return removed
    }

    package var isFresh: Bool { state.withLock { $0.readAt }.map { clock.now - $0 <= maximumStaleness } ?? false }
    package var count: Int { state.withLock { $0.set.count } }
}
