import Foundation
import Logging
import Metrics
import Synchronization
import TokenGuardCore
import TokenGuardSync

/// A provider's keys fetched from its JWKS over HTTPS: cached, refreshed ahead of expiry, kept through outages.
///
/// - The hot path (``currentKeys()``) reads an immutable ``KeySet`` under a lock and never fetches.
/// - A token with an unknown `kid` triggers at most one refetch per cooldown, shared by every concurrent caller
///   (single flight); the rest answer `unknown_key` at once, so random key ids cannot multiply IdP requests.
/// - A failed fetch (transport error, error status, oversized or malformed JWKS) keeps the last good keys until
///   they are older than the maximum stale age; then, and with no keys at all, the answer is `keys_unavailable`.
///   Failures are retried with capped, jittered exponential backoff.
/// - With an archive, fetched keys are recorded (after the fetch, off the hot path); on start, keys seen within
///   the maximum stale age are used until the first fetch succeeds.
package final class JWKSKeySource: KeySource {
    /// Where the JWKS lives: a URL, or found through the issuer's OpenID discovery document.
    package enum Location: Sendable, Equatable {
        case jwks(String)
        /// The discovered `jwks_uri` must pass ``OutboundURL/validateDiscoveredJWKS(_:issuer:jwksHosts:devIdP:)``.
        case discovery(issuer: String, jwksHosts: [String] = [], devIdP: Bool = false)
    }

    package let provider: String
    package let location: Location
    package let policy: KeyFetchPolicy
    /// What the provider publishes, watched for change.
    package let drift: DriftMonitor
    /// A discovery document fetched after each JWKS fetch only to watch for drift (never trusted).
    package let watchedDiscoveryURL: String?
    private let fetcher: any HTTPFetching
    /// Fetches the watched discovery document: a fetcher of its own when given, so that a watched endpoint that hangs
    /// never holds the key fetches' threads (red team: two hanging watches blocked an unknown-kid refetch for 15 s).
    private let watchFetcher: any HTTPFetching
    private let archive: KeyArchive?
    private let clock: WallClock
    private let logger: Logger
    private let state: Locked<State>
    /// `tokenguard_unknown_kid_refetches_total{outcome}`, made once: a flood of unknown kids counts without a lookup in
    /// the metrics registry (and its lock) under this source's lock.
    private let unknownKidRefetches: (performed: Counter, suppressed: Counter)
    private static let archiveQueue = DispatchQueue(label: "tokenguard.key-archive")

    struct State {
        var keys: KeySet? { didSet { historical = nil } }
        var fetchedAt: Double?
        var expiresAt: Double = 0
        /// When the background loop fetches next after a success (see ``refreshTime(fetchedAt:ttl:jitter:)``).
        var refreshAt: Double = 0
        var lastError: String?
        var failures = 0
        var nextAttemptAt: Double = 0
        var lastUnknownKeyRefetch: Double = -.infinity
        var inflight: Task<Result<KeySet, VerificationError>, Never>?
        var jwksURL: String?
        /// Archived keys no longer in the current set, for verification at a past time.
        var retired: [VerificationKey] = [] { didSet { historical = nil } }
        /// The current keys then the retired ones, as one set: made once per change of either, not per token (a batch
        /// over a log verifies every line at its own time; a set made per line also lost its known headers).
        var historical: KeySet?
        /// The keys the last fetched JWKS listed but tokenguard skipped, even when that left none usable.
        var lastSkipped: [JWKParser.Skipped] = []
        /// A watch of the discovery document is under way: at most one at a time, however often keys are fetched.
        var watching = false
    }

    package init(
        provider: String, location: Location, fetcher: any HTTPFetching, policy: KeyFetchPolicy = KeyFetchPolicy(),
        archive: KeyArchive? = nil, logger: Logger = Logger(label: "tokenguard.keys"),
        clock: WallClock = .system, watchedDiscoveryURL: String? = nil, watchFetcher: (any HTTPFetching)? = nil
    ) {
        self.provider = provider
        self.location = location
        self.drift = DriftMonitor(provider: provider)
        unknownKidRefetches = (
            Counter(label: "tokenguard_unknown_kid_refetches_total", dimensions: [("provider", provider), ("outcome", "performed")]),
            Counter(label: "tokenguard_unknown_kid_refetches_total", dimensions: [("provider", provider), ("outcome", "suppressed")])
        )
        if case .discovery(let issuer, _, _) = location {
            self.watchedDiscoveryURL = (issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer) + "/.well-known/openid-configuration"
        } else {
            self.watchedDiscoveryURL = watchedDiscoveryURL
        }
        self.fetcher = fetcher
        self.watchFetcher = watchFetcher ?? fetcher
        self.policy = policy
        self.archive = archive
        self.clock = clock
        var logger = logger
        logger[metadataKey: "provider"] = "\(provider)"
        self.logger = logger
        var initial = State()
        if case .jwks(let url) = location { initial.jwksURL = url }
        self.state = Locked(initial)
        loadFromArchive()
    }

    // MARK: - KeySource

    package func currentKeys() -> Result<KeySet, VerificationError> {
        let now = clock.now
        return state.withLock { state in
            if let keys = state.keys, hasUsableKeys(state.keys, fetchedAt: state.fetchedAt, now: now) { return .success(keys) }
            return .failure(unavailable(state, now: now))
        }
    }

    /// Keys are used up to ``KeyFetchPolicy/maximumStaleAge`` after the fetch that brought them, whatever happened since.
    /// (Takes the fields, not the state: a copy of it would cost retains on every verification.)
    private func hasUsableKeys(_ keys: KeySet?, fetchedAt: Double?, now: Double) -> Bool {
        guard keys != nil, let fetchedAt else { return false }
        return now - fetchedAt <= policy.maximumStaleAge
    }

    package func historicalKeys() -> Result<KeySet, VerificationError> {
        let combined = state.withLock { state -> KeySet? in
            if let made = state.historical { return made }
            let keys = (state.keys?.keys ?? []) + state.retired
            guard !keys.isEmpty else { return nil }
            let made = KeySet(keys: keys)
            state.historical = made
            return made
        }
        return combined.map { .success($0) } ?? currentKeys()
    }

    package func keysAfterMiss(keyID: String?) async -> Result<KeySet, VerificationError>? {
        let now = clock.now
        enum Decision {
            case join(Task<Result<KeySet, VerificationError>, Never>)
            case answerFromKeysInHand
            case keysInHand(KeySet)
            case unavailable(VerificationError)
        }
        let decision: Decision = state.withLock { state in
            let usable = hasUsableKeys(state.keys, fetchedAt: state.fetchedAt, now: now)
            if let inflight = state.inflight {
                // During a known outage, do not queue behind a fetch that will likely time out as well: with a slow
                // IdP every unknown kid would wait the full outbound timeout.
                if usable && state.failures > 0 { return suppressed(state, now: now) }
                return .join(inflight)
            }
            if usable, let keys = state.keys, let keyID, keys.contains(keyID: keyID) {
                // The caller missed against older keys (before the first fetch, or a rotation) and the key is in hand
                // now: answer from it rather than fetch again (at cold start, 1,000 callers share one fetch).
                return .keysInHand(keys)
            }
            if usable {
                // Unknown kid with good keys in hand: one refetch per cooldown, and none while backing off after
                // failures (with a short cooldown, every unknown kid would otherwise reach a failing IdP).
                guard now - state.lastUnknownKeyRefetch >= policy.unknownKeyCooldown, state.failures == 0 || now >= state.nextAttemptAt else {
                    unknownKidRefetches.suppressed.increment()
                    return suppressed(state, now: now)
                }
                state.lastUnknownKeyRefetch = now
                unknownKidRefetches.performed.increment()
            } else if now < state.nextAttemptAt {
                return suppressed(state, now: now)  // backing off after failures
            }
            return .join(startFetch(&state))
        }
        switch decision {
        case .join(let task): return await task.value
        case .answerFromKeysInHand: return nil
        case .keysInHand(let keys): return .success(keys)
        case .unavailable(let error): return .failure(error)
        }

        /// No refetch now. If the last attempt failed, the IdP may be publishing a key we cannot see: an outage
        /// must not be reported as a forged token, so the answer is `keys_unavailable`, not `unknown_key`.
        func suppressed(_ state: State, now: Double) -> Decision {
            guard state.failures > 0 else { return .answerFromKeysInHand }
            let retryAfter = max(1, Int((state.nextAttemptAt - now).rounded(.up)))
            return .unavailable(
                VerificationError(
                    .keysUnavailable,
                    "no key with this kid in \(provider)'s last good keys, and the IdP's keys cannot be fetched now"
                        + (state.lastError.map { ": \($0)" } ?? ""), retryAfterSeconds: retryAfter))
        }
    }

    package var status: KeySourceStatus {
        let now = clock.now
        return state.withLock { state in
            let usable = hasUsableKeys(state.keys, fetchedAt: state.fetchedAt, now: now)
            return KeySourceStatus(
                keyIDs: state.keys?.keys.compactMap(\.keyID) ?? [], usable: usable, fetchedAt: state.fetchedAt,
                expiresAt: state.fetchedAt == nil ? nil : state.expiresAt, lastError: state.lastError, consecutiveFailures: state.failures,
                skippedKeys: state.lastSkipped)
        }
    }

    // MARK: - Refreshing

    /// Fetches now, or joins the fetch already under way.
    @discardableResult
    package func refresh() async -> Result<KeySet, VerificationError> {
        let task = state.withLock { state in state.inflight ?? startFetch(&state) }
        return await task.value
    }

    /// Keeps the keys fresh until cancelled: refreshes ahead of expiry (with jitter) and retries failures with
    /// backoff. Run it as a background task for the life of the service. `sleep` waits the given seconds and throws
    /// when cancelled (tests pass one that moves their clock instead).
    ///
    /// The plan is read again after every wait of at most ``recheckSeconds``: a fetch made meanwhile for an unknown
    /// `kid` may have brought a shorter TTL, or failed and so need retrying with backoff.
    package func runRefreshLoop(sleep: @Sendable (Double) async throws -> Void = JWKSKeySource.sleep) async {
        while !Task.isCancelled {
            let delay = nextRefreshDelay()
            if delay > 0 {
                do { try await sleep(min(delay, Self.recheckSeconds)) } catch { return }
                continue
            }
            // Not `refresh()`: cancelled (a shutdown), the loop stops waiting at once; the fetch goes on for the
            // verifications that share it, and a hanging IdP cannot hold the shutdown for the outbound timeout.
            let fetch = state.withLock { state in state.inflight ?? startFetch(&state) }
            guard await Self.valueUnlessCancelled(of: fetch) != nil else { return }
            Gauge(label: "tokenguard_key_age_seconds", dimensions: [("provider", provider)])
                .record(state.withLock { $0.fetchedAt.map { clock.now - $0 } ?? -1 })
        }
    }

    /// `task`'s value, or nil as soon as the calling task is cancelled (`task` itself runs on).
    static func valueUnlessCancelled<T: Sendable>(of task: Task<T, Never>) async -> T? {
        // The continuation is resumed once: by the task's end or by the cancellation, whichever comes first
        // (a cancellation before the continuation exists marks the slot, and the body resumes at once).
        let slot = Locked<(continuation: CheckedContinuation<T?, Never>?, finished: Bool)>((nil, false))
        @Sendable func finish(_ value: T?) {
            let continuation = slot.withLock { slot -> CheckedContinuation<T?, Never>? in
                defer { slot = (nil, true) }
                return slot.finished ? nil : slot.continuation
            }
            continuation?.resume(returning: value)
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let alreadyCancelled = slot.withLock { slot -> Bool in
                    if slot.finished { return true }
                    slot.continuation = continuation
                    return false
                }
                if alreadyCancelled { return continuation.resume(returning: nil) }
                Task { finish(await task.value) }
            }
        } onCancel: {
            finish(nil)
        }
    }

    package static let recheckSeconds: Double = 5
    /// Background fetches are at least this far apart after a success, whatever the TTL (`no-store` with a minimum
    /// TTL of 0, or a maximum stale age of 0, would otherwise fetch without pause).
    package static let minimumRefreshInterval: Double = 1

    /// Seconds until the background loop should fetch: at once before any keys, the backoff after a failure, else
    /// until the time planned at the last success.
    package func nextRefreshDelay() -> Double {
        let now = clock.now
        return state.withLock { state in
            if state.failures > 0 || state.keys == nil { return max(0, state.nextAttemptAt - now) }
            return max(0, state.refreshAt - now)
        }
    }

    /// When to fetch after a success at `fetchedAt` with `ttl`: ahead of expiry by 5–10 % of the TTL (at most a
    /// minute; `jitter` in 0...1 spreads a fleet), and no later than half the maximum stale age, so that an outage
    /// starting then still leaves the keys usable for at least the other half; never sooner than
    /// ``minimumRefreshInterval``.
    package func refreshTime(fetchedAt: Double, ttl: Double, jitter: Double) -> Double {
        let ahead = min(ttl * 0.1, 60) * (0.5 + 0.5 * jitter)
        let planned = min(fetchedAt + ttl - ahead, fetchedAt + policy.maximumStaleAge / 2)
        return max(planned, fetchedAt + Self.minimumRefreshInterval)
    }

    /// Seconds before retrying after `failures` consecutive failed fetches: the policy's backoff, but never past the
    /// moment the keys in hand go stale (`usableUntil`), and without usable keys at most
    /// ``KeyFetchPolicy/maximumBackoffWithoutKeys``: every verification is failing then, and a service that waited
    /// five minutes more after its IdP came back would add an outage of its own.
    package func retryDelay(failures: Int, usableUntil: Double?, now: Double) -> Double {
        let jitter = Double.random(in: 0...1)
        let backoff = policy.backoff(failures: failures, jitter: jitter)
        guard let usableUntil else { return min(backoff, policy.maximumBackoffWithoutKeys * (0.9 + 0.2 * jitter)) }
        return min(backoff, max(usableUntil - now, Self.minimumRefreshInterval))
    }

    package static func sleep(_ seconds: Double) async throws { try await Task.sleep(nanoseconds: UInt64(seconds * 1e9)) }

    private func startFetch(_ state: inout State) -> Task<Result<KeySet, VerificationError>, Never> {
        let task = Task { await self.fetch() }
        state.inflight = task
        return task
    }

    private func fetch() async -> Result<KeySet, VerificationError> {
        let started = clock.now
        do {
            let url = try await resolveJWKSURL()
            let response = try await fetcher.send(
                HTTPRequest(url: url, headers: [("Accept", "application/json")], maximumResponseBytes: policy.maximumDocumentBytes))
            guard response.status == 200 else { throw FetchFailure("HTTP \(response.status) from the JWKS endpoint", outcome: "http_error") }
            let keySet: KeySet
            do {
                keySet = try KeySet.parse(jwks: response.body)
            } catch {
                throw FetchFailure("malformed JWKS: \(error.message)", outcome: "malformed")
            }
            state.withLock { $0.lastSkipped = keySet.skipped }
            guard !keySet.keys.isEmpty else {
                let reasons = keySet.skipped.prefix(4).map(\.description).joined(separator: "; ")
                throw FetchFailure("JWKS has no usable keys (\(keySet.skipped.count) skipped: \(reasons))", outcome: "malformed")
            }
            if !keySet.skipped.isEmpty {
                // Once per fetch: a skipped key is otherwise invisible until a token names it.
                logger.warning(
                    "JWKS keys skipped",
                    metadata: [
                        "provider": "\(provider)",
                        "skipped": "\(keySet.skipped.map { "\(($0.keyID ?? "(no kid)").excerpt(bytes: 64)): \($0.reason)" }.joined(separator: "; "))",
                    ])
            }
            let ttl = policy.ttl(cacheControl: response.combinedHeader("cache-control"))
            let now = clock.now
            succeed(keySet, ttl: ttl, at: now)
            // The keys are already in use; the fetch completes once they are archived (and the retired keys for
            // verification at a past time re-read), so a caller that awaited it sees a consistent archive.
            await archiveKeys(keySet, at: now)
            drift.observe(keys: keySet, at: Int64(now))
            // Watching is off the fetch path: a slow discovery document never delays keys.
            Task { await self.watchDiscovery(at: Int64(now)) }
            return .success(keySet)
        } catch let failure as FetchFailure {
            return fail(failure, started: started)
        } catch let error as FetchError {
            return fail(FetchFailure("\(error.kind.rawValue): \(error.message)", outcome: error.kind.rawValue), started: started)
        } catch {
            return fail(FetchFailure("\(error)", outcome: "error"), started: started)
        }
    }

    private func succeed(_ keySet: KeySet, ttl: Double, at now: Double) {
        let previous: KeySet? = state.withLock { state in
            let previous = state.keys
            state.keys = keySet
            state.fetchedAt = now
            state.expiresAt = now + ttl
            state.refreshAt = refreshTime(fetchedAt: now, ttl: ttl, jitter: Double.random(in: 0...1))
            state.lastError = nil
            state.failures = 0
            state.nextAttemptAt = 0
            state.inflight = nil
            return previous
        }
        Counter(label: "tokenguard_jwks_fetches_total", dimensions: [("provider", provider), ("outcome", "ok")]).increment()
        Gauge(label: "tokenguard_keys", dimensions: [("provider", provider)]).record(keySet.keys.count)
        Gauge(label: "tokenguard_key_age_seconds", dimensions: [("provider", provider)]).record(0)
        logger.info("fetched JWKS", metadata: ["keys": "\(keySet.keys.count)", "skipped": "\(keySet.skipped.count)", "ttl_s": "\(Int(ttl))"])
        for skipped in keySet.skipped { logger.debug("skipped a JWKS key", metadata: ["reason": "\(skipped)"]) }
        if let previous { reportSuspicious(previous: previous, current: keySet) }
    }

    private func fail(_ failure: FetchFailure, started: Double) -> Result<KeySet, VerificationError> {
        let now = clock.now
        let (failures, delay, stillUsable): (Int, Double, Bool) = state.withLock { state in
            state.failures += 1
            state.lastError = failure.message
            let usable = hasUsableKeys(state.keys, fetchedAt: state.fetchedAt, now: now)
            let delay = retryDelay(
                failures: state.failures, usableUntil: usable ? state.fetchedAt.map { $0 + policy.maximumStaleAge } : nil, now: now)
            state.nextAttemptAt = now + delay
            state.inflight = nil
            return (state.failures, delay, usable)
        }
        Counter(label: "tokenguard_jwks_fetches_total", dimensions: [("provider", provider), ("outcome", failure.outcome)]).increment()
        logger.warning(
            "JWKS fetch failed; \(stillUsable ? "keeping the last good keys" : "no usable keys")",
            metadata: [
                "error": "\(failure.message)", "consecutive_failures": "\(failures)", "retry_in_s": "\(String(format: "%.1f", delay))",
                "took_ms": "\(Int((now - started) * 1000))",
            ])
        return .failure(VerificationError(.keysUnavailable, "cannot fetch \(provider) keys: \(failure.message)"))
    }

    private func unavailable(_ state: State, now: Double) -> VerificationError {
        if let fetchedAt = state.fetchedAt, state.keys != nil {
            return VerificationError(
                .keysUnavailable,
                "\(provider) keys are \(Int(now - fetchedAt)) s old, beyond the maximum stale age of \(Int(policy.maximumStaleAge)) s"
                    + (state.lastError.map { "; last error: \($0)" } ?? ""))
        }
        return VerificationError(.keysUnavailable, "\(provider) keys not fetched yet" + (state.lastError.map { "; last error: \($0)" } ?? ""))
    }

    /// A `kid` whose key material changed, or a fetch that replaced every key at once, is worth a look: it is
    /// what a compromised or spoofed JWKS endpoint would produce. Logged and counted; both versions are archived.
    private func reportSuspicious(previous: KeySet, current: KeySet) {
        // Keyed by bytes: a kid republished in a canonically equivalent spelling is another kid.
        let old = Dictionary(
            previous.keys.compactMap { key in key.keyID.map { (ByteKey($0), key.thumbprint) } }, uniquingKeysWith: { first, _ in first })
        var changed: [String] = []
        var overlap = false
        for key in current.keys {
            guard let kid = key.keyID, let thumbprint = old[ByteKey(kid)] else { continue }
            overlap = true
            if !thumbprint.sameBytes(as: key.thumbprint) { changed.append(kid) }
        }
        if !changed.isEmpty {
            Counter(label: "tokenguard_jwks_suspicious_total", dimensions: [("provider", provider), ("kind", "kid_material_changed")]).increment()
            logger.warning("a JWKS key id now names different key material", metadata: ["kids": "\(changed.joined(separator: ","))"])
        }
        if !overlap && !old.isEmpty {
            Counter(label: "tokenguard_jwks_suspicious_total", dimensions: [("provider", provider), ("kind", "all_keys_replaced")]).increment()
            logger.warning("the JWKS replaced every key at once", metadata: ["previous": "\(old.count)", "current": "\(current.keys.count)"])
        }
    }

    // MARK: - Discovery

    /// Fetches the watched discovery document and records what it says; a failure is only logged (watching is not
    /// verifying).
    private func watchDiscovery(at seconds: Int64) async {
        guard let url = watchedDiscoveryURL else { return }
        let starts = state.withLock { state -> Bool in
            guard !state.watching else { return false }
            state.watching = true
            return true
        }
        guard starts else { return }
        defer { state.withLock { $0.watching = false } }
        do {
            _ = try OutboundURL.validate(url)
            let response = try await watchFetcher.send(
                HTTPRequest(url: url, headers: [("Accept", "application/json")], maximumResponseBytes: 256 * 1024))
            guard response.status == 200, let document = try? JSONParser.parseObject(response.body) else {
                logger.debug("watched discovery document unavailable", metadata: ["status": "\(response.status)"])
                return
            }
            drift.observe(discovery: document, at: seconds)
        } catch {
            logger.debug("watched discovery document unavailable", metadata: ["error": "\(error)"])
        }
    }

    private func resolveJWKSURL() async throws -> String {
        if let url = state.withLock({ $0.jwksURL }) { return url }
        guard case .discovery(let issuer, let jwksHosts, let devIdP) = location else { throw FetchFailure("no JWKS URL", outcome: "config") }
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        let response = try await fetcher.send(
            HTTPRequest(url: base + "/.well-known/openid-configuration", headers: [("Accept", "application/json")], maximumResponseBytes: 1 << 20))
        guard response.status == 200 else { throw FetchFailure("HTTP \(response.status) from the discovery document", outcome: "http_error") }
        guard let document = try? JSONParser.parseObject(response.body) else {
            throw FetchFailure("discovery document is not a JSON object", outcome: "malformed")
        }
        // OpenID Connect Discovery §4.3: the issuer in the document must be exactly the one configured.
        guard let documentIssuer = document["issuer"]?.stringValue, documentIssuer.sameBytes(as: issuer) else {
            throw FetchFailure(
                "discovery document names issuer \(document["issuer"].map { JSONWriter.string($0).excerpt(bytes: 128) } ?? "none"), not \(issuer)",
                outcome: "malformed")
        }
        guard let jwksURI = document["jwks_uri"]?.stringValue else { throw FetchFailure("discovery document has no jwks_uri", outcome: "malformed") }
        do {
            _ = try OutboundURL.validateDiscoveredJWKS(jwksURI, issuer: issuer, jwksHosts: jwksHosts, devIdP: devIdP)
        } catch {
            throw FetchFailure("discovery jwks_uri refused: \(error.message)", outcome: "malformed")
        }
        state.withLock { $0.jwksURL = jwksURI }
        return jwksURI
    }

    // MARK: - Archive

    /// Where this source's keys come from, as the archive records it: archived keys stand in only for the same place
    /// (the JWKS URL, or the discovery issuer with the hosts its `jwks_uri` may name and whether it is a development IdP).
    /// The hosts are a set: listed in another order or twice, they are the same source and keep its archived keys.
    package var archiveSource: String {
        switch location {
        case .jwks(let url): "jwks \(url)"
        case .discovery(let issuer, let jwksHosts, let devIdP):
            "discovery \(issuer) jwks_hosts=\(Self.canonicalHosts(jwksHosts).joined(separator: ","))\(devIdP ? " dev_idp" : "")"
        }
    }

    /// Sorted by bytes, each once (hosts are compared as bytes, as ``OutboundURL`` compares them).
    static func canonicalHosts(_ hosts: [String]) -> [String] {
        var unique: [String] = []
        for host in hosts.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) where unique.last.map({ !$0.sameBytes(as: host) }) ?? true {
            unique.append(host)
        }
        return unique
    }

    /// Records the fetched keys on the archive's own queue (SQLite is blocking I/O: never on the cooperative pool).
    /// A failed write is logged and counted; the keys in memory are unaffected.
    private func archiveKeys(_ keySet: KeySet, at now: Double) async {
        guard let archive else { return }
        let provider = self.provider
        let logger = self.logger
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Self.archiveQueue.async {
                do {
                    try archive.record(provider: provider, source: self.archiveSource, keys: keySet.keys, seenAt: Int64(now))
                    self.reloadRetired()
                } catch {
                    Counter(label: "tokenguard_key_archive_errors_total", dimensions: [("provider", provider)]).increment()
                    logger.error("cannot write the key archive; verification continues with keys in memory", metadata: ["error": "\(error)"])
                }
                continuation.resume()
            }
        }
    }

    /// Loads archived keys: recent ones become the starting key set (restart during an outage); ones not in the
    /// current set become the retired keys used only for verification at a past time.
    private func loadFromArchive() {
        guard let archive else { return }
        let now = clock.now
        do {
            let since = now - policy.maximumStaleAge
            // Rows claiming to be seen in the future would count as fresh forever: only the past counts.
            let recent = try archive.entries(
                provider: provider, source: archiveSource, lastSeenSince: since.isFinite ? Int64(max(0, min(since, 1e15))) : 0
            )
            .filter { Double($0.lastSeen) <= now + 300 }
            // The last good set: the keys seen in the most recent fetch (every key of one fetch shares its time).
            let lastSeen = recent.map(\.lastSeen).max()
            let keys = recent.filter { $0.lastSeen == lastSeen }.compactMap { $0.verificationKey(window: false) }
            if !keys.isEmpty, let lastSeen {
                state.withLock { state in
                    state.keys = KeySet(keys: keys)
                    state.fetchedAt = Double(lastSeen)
                    state.expiresAt = now  // refresh at once; these serve only until the first fetch succeeds
                    state.refreshAt = now
                }
                logger.info("using archived keys until the first fetch", metadata: ["keys": "\(keys.count)", "last_seen": "\(lastSeen)"])
            }
        } catch {
            logger.error("cannot read the key archive", metadata: ["error": "\(error)"])
        }
        reloadRetired()
    }

    private func reloadRetired() {
        guard let archive, let entries = try? archive.entries(provider: provider, source: archiveSource) else { return }
        let current = Set(state.withLock { $0.keys?.keys.map(\.thumbprint) ?? [] })
        let retired = entries.filter { !current.contains($0.thumbprint) }.compactMap { $0.verificationKey(window: true) }
        state.withLock { $0.retired = retired }
    }
}

struct FetchFailure: Error {
    let message: String
    let outcome: String
    init(_ message: String, outcome: String) {
        self.message = message
        self.outcome = outcome
    }
}
