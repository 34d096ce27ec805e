import Foundation
import Metrics
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardSync

/// Remembers accepted tokens and nonces until they expire, so each is accepted once (contract: `replay`).
///
/// `claim` is atomic: either every key is new and all are recorded, or nothing is recorded and the answer is
/// "seen". A store that cannot answer says so (`replay_store_unavailable`): it never accepts silently and never
/// forgets an unexpired entry to make room.
package protocol ReplayStore: Sendable {
    /// Records `keys` until `expiresAt` (Unix seconds) if none is present. True when recorded; false when any
    /// key was already there (a replay).
    func claim(keys: [String], expiresAt: Int64) async -> Result<Bool, VerificationError>
    /// True for a store that answers a claim at once (in memory): ``claimWithoutWaiting(keys:expiresAt:)`` then
    /// gives what ``claim(keys:expiresAt:)`` would.
    var claimsWithoutWaiting: Bool { get }
    /// The claim's answer when the store gives it without waiting; nil for a store that must be asked (Redis).
    func claimWithoutWaiting(keys: [String], expiresAt: Int64) -> Result<Bool, VerificationError>?
    /// A description for `/readyz` and logs, and whether the store answers now.
    func health() async -> (ok: Bool, detail: String)
    /// Writes out what the store still holds for later (at shutdown, after the last request was answered).
    func finish() async
}

extension ReplayStore {
    package func finish() async {}
    package var claimsWithoutWaiting: Bool { false }
    package func claimWithoutWaiting(keys: [String], expiresAt: Int64) -> Result<Bool, VerificationError>? { nil }
}

/// Replay keys: SHA-256 hex of what the signer signed, never of the signature bytes (an ECDSA signature
/// `(r, s)` has a twin `(r, n - s)` that verifies too, so a key over the signature would give a second use).
///
/// - `t`: the JWS signing input (`header.payload`, the token's bytes up to its last `.`);
/// - `j`: the `jti` claim, when the token has one (the issuer's own id for the token, whatever its encoding);
/// - `n`: the `nonce` claim, when the token has one (one sign-in request, one token).
///
/// Built from the configured provider name (never the request's spelling) and bytes only.
package enum ReplayKeys {
    package static func keys(provider: String, token: String, jti: String?, nonceClaim: String?) -> [String] {
        var keys = ["tg:replay:\(provider):t:\(SHA256.hexDigest(signingInput(of: token)))"]
        if let jti { keys.append("tg:replay:\(provider):j:\(SHA256.hexDigest(jti.utf8))") }
        if let nonceClaim { keys.append("tg:replay:\(provider):n:\(SHA256.hexDigest(nonceClaim.utf8))") }
        return keys
    }

    /// The bytes before the last `.`: the JWS signing input of a compact JWS (the whole token otherwise).
    static func signingInput(of token: String) -> ArraySlice<UInt8> {
        let bytes = Array(token.utf8)
        guard let dot = bytes.lastIndex(of: UInt8(ascii: ".")) else { return bytes[...] }
        return bytes[..<dot]
    }
}

/// One process's replay store: bounded, entries expiring by deadline. Full (after dropping expired entries)
/// means `replay_store_unavailable`, never forgetting a live entry.
package final class MemoryReplayStore: ReplayStore {
    struct State {
        var deadlines: [String: Int64] = [:]
        var lastSweep: Int64 = 0
    }

    package let capacity: Int
    private let state = Locked(State())
    private let clock: WallClock

    package init(capacity: Int = 1_000_000, clock: WallClock = .system) {
        self.capacity = capacity
        self.clock = clock
    }

    package func claim(keys: [String], expiresAt: Int64) async -> Result<Bool, VerificationError> {
        claimNow(keys: keys, expiresAt: expiresAt)
    }

    package var claimsWithoutWaiting: Bool { true }

    package func claimWithoutWaiting(keys: [String], expiresAt: Int64) -> Result<Bool, VerificationError>? {
        claimNow(keys: keys, expiresAt: expiresAt)
    }

    private func claimNow(keys: [String], expiresAt: Int64) -> Result<Bool, VerificationError> {
        let now = clock.seconds
        return state.withLock { state in
            for key in keys {
                if let deadline = state.deadlines[key], deadline > now { return .success(false) }
            }
            if state.deadlines.count + keys.count > capacity || now - state.lastSweep > 60 {
                state.deadlines = state.deadlines.filter { $0.value > now }
                state.lastSweep = now
            }
            guard state.deadlines.count + keys.count <= capacity else {
                return .failure(
                    VerificationError(.replayStoreUnavailable, "the replay store is full (\(capacity) live entries)", retryAfterSeconds: 5))
            }
            // A cancelled request was answered already (its timeout's 503), and a closed batch or a passed deadline is
            // answering without this verification: a claim now would never reach the client, and the client's retry
            // would meet `token_replayed`. (The Redis store asks the same on its "claimed" reply, and takes such a claim
            // back.) Asked only for a claim about to be recorded: the gate holds a claim, never a replay's answer.
            if !ReplayClaimGates.mayKeepClaim() { return .failure(ReplayGuard.abandoned) }
            for key in keys { state.deadlines[key] = expiresAt }
            return .success(true)
        }
    }

    package var count: Int { state.withLock { $0.deadlines.count } }

    package func health() async -> (ok: Bool, detail: String) {
        let count = state.withLock { $0.deadlines.count }
        return (count < capacity, "memory, \(count) of \(capacity) entries")
    }
}

/// The replay check applied to a verdict: after every other check has passed, so a rejected token never
/// consumes an entry.
package struct ReplayGuard: Sendable {
    package let store: any ReplayStore
    package let leewaySeconds: Int64
    /// Seconds an entry outlives its token's last accepted second. A claim is recorded a little after the check
    /// that let its token in (a key fetch, a queue), and the store reads its own clock (Redis its server's): without
    /// the margin, a twin checked in the token's last second could find the first use's entry already expired when
    /// its claim arrives in the next, and be accepted too.
    package let claimMarginSeconds: Int64
    private let clock: WallClock
    /// `tokenguard_replay_checks_total{provider,outcome}`: first use, replay, store error. Made once: a metric handle
    /// made per check is a lookup in the metrics registry under its lock.
    private let outcomes: (firstUse: Counter, replay: Counter, storeError: Counter)

    /// The answer to a claim its request no longer waits for (never delivered).
    package static let abandoned = VerificationError(.requestTimeout, "the request was answered before its replay claim", retryAfterSeconds: 1)

    package init(provider: String, store: any ReplayStore, leewaySeconds: Int64, claimMarginSeconds: Int64 = 16, clock: WallClock = .system) {
        self.store = store
        self.leewaySeconds = leewaySeconds
        self.claimMarginSeconds = max(claimMarginSeconds, 1)
        self.clock = clock
        func counter(_ outcome: String) -> Counter {
            Counter(label: "tokenguard_replay_checks_total", dimensions: [("provider", provider), ("outcome", outcome)])
        }
        outcomes = (counter("first_use"), counter("replay"), counter("store_error"))
    }

    package func check(_ result: VerificationResult, provider: String, token: String) async -> VerificationResult {
        switch claim(for: result, provider: provider, token: token) {
        case .decided(let answer): return answer
        case .claim(let keys, let expiresAt): return outcome(of: await store.claim(keys: keys, expiresAt: expiresAt), result, provider: provider)
        }
    }

    /// As ``check(_:provider:token:)`` when the store answers without waiting (``ReplayStore/claimsWithoutWaiting``);
    /// nil, with nothing claimed, when it must be asked.
    package func checkWithoutWaiting(_ result: VerificationResult, provider: String, token: String) -> VerificationResult? {
        guard store.claimsWithoutWaiting else { return nil }
        switch claim(for: result, provider: provider, token: token) {
        case .decided(let answer): return answer
        case .claim(let keys, let expiresAt):
            guard let claimed = store.claimWithoutWaiting(keys: keys, expiresAt: expiresAt) else { return nil }
            return outcome(of: claimed, result, provider: provider)
        }
    }

    private enum Claim {
        /// Answered without asking the store: a refusal stays one; a claim now would be too late.
        case decided(VerificationResult)
        case claim(keys: [String], expiresAt: Int64)
    }

    private func claim(for result: VerificationResult, provider: String, token: String) -> Claim {
        guard case .success(let verdict) = result else { return .decided(result) }
        let keys = ReplayKeys.keys(
            provider: provider, token: token, jti: verdict.claim("jti")?.stringValue, nonceClaim: verdict.claim("nonce")?.stringValue)
        let now = clock.seconds
        // Checked again at the claim: a token that expired while its verification waited (for keys, for a store) is
        // refused as expired, so every claim is made while the entries of the token's earlier uses are still live.
        if let expiry = verdict.expiresAt, now >= expiry + leewaySeconds {
            return .decided(
                .failure(
                    VerificationError(
                        .tokenExpired, "token expired at \(UTCTime.iso8601(expiry)) (leeway \(leewaySeconds)s) before its use was recorded")))
        }
        if let gate = ReplayClaimGates.current, !gate.isOpen { return .decided(.failure(Self.abandoned)) }
        return .claim(keys: keys, expiresAt: (verdict.expiresAt ?? now + 3600) + leewaySeconds + claimMarginSeconds)
    }

    private func outcome(of claimed: Result<Bool, VerificationError>, _ result: VerificationResult, provider: String) -> VerificationResult {
        switch claimed {
        case .success(true):
            outcomes.firstUse.increment()
            return result
        case .success(false):
            outcomes.replay.increment()
            return .failure(VerificationError(.tokenReplayed, "this token, or its nonce, was already used with \(provider)"))
        case .failure(let error):
            outcomes.storeError.increment()
            return .failure(error)
        }
    }
}
