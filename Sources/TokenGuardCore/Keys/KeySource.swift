import TokenGuardSync
import Foundation
import Synchronization

/// Where a provider's verification keys come from. The verifier asks on every token, so implementations
/// answer from memory: an immutable ``KeySet`` snapshot, never a fetch on the hot path.
public protocol KeySource: Sendable {
    /// The keys usable now, or a `keys_unavailable` error when the source cannot say (never a rejection).
    func currentKeys() -> Result<KeySet, VerificationError>

    /// Called when a token names a `kid` the current set lacks, or when no keys are usable. A fetching source
    /// may refresh (once, shared by concurrent callers, rate-limited) and return the new set; nil means
    /// "nothing newer": the first answer stands.
    func keysAfterMiss(keyID: String?) async -> Result<KeySet, VerificationError>?

    /// Keys for verifying a logged token as of a past time: the current keys plus, for a fetching source with
    /// an archive, keys since rotated out, each limited to tokens issued while it was published.
    func historicalKeys() -> Result<KeySet, VerificationError>

    /// A summary for `/v1/providers`, `/readyz` and `tokenguard keys`.
    var status: KeySourceStatus { get }
}

extension KeySource {
    public func keysAfterMiss(keyID: String?) async -> Result<KeySet, VerificationError>? { nil }
    public func historicalKeys() -> Result<KeySet, VerificationError> { currentKeys() }
    public var status: KeySourceStatus {
        switch currentKeys() {
        case .success(let keys): KeySourceStatus(keyIDs: keys.keys.compactMap(\.keyID), usable: true, skippedKeys: keys.skipped)
        case .failure(let error): KeySourceStatus(keyIDs: [], usable: false, lastError: error.message)
        }
    }
}

/// What a key source holds now.
public struct KeySourceStatus: Sendable, Equatable {
    public var keyIDs: [String]
    /// True when verification can use keys now.
    public var usable: Bool
    /// Unix seconds of the last successful fetch, and when the keys are due for refresh.
    public var fetchedAt: Double?
    public var expiresAt: Double?
    public var lastError: String?
    /// Consecutive failed fetches since the last success.
    public var consecutiveFailures = 0
    /// Keys in the JWKS that tokenguard will not use, with the reason (contract: `skipped_keys`).
    public var skippedKeys: [JWKParser.Skipped] = []

    public init(
        keyIDs: [String], usable: Bool, fetchedAt: Double? = nil, expiresAt: Double? = nil, lastError: String? = nil,
        consecutiveFailures: Int = 0, skippedKeys: [JWKParser.Skipped] = []
    ) {
        self.skippedKeys = skippedKeys
        self.keyIDs = keyIDs
        self.usable = usable
        self.fetchedAt = fetchedAt
        self.expiresAt = expiresAt
        self.lastError = lastError
        self.consecutiveFailures = consecutiveFailures
    }
}

/// A fixed key set held in memory (tests, embedded use, pinned keys given as a JWKS string).
public struct InMemoryKeySource: KeySource {
    public let keySet: KeySet

    public init(_ keySet: KeySet) { self.keySet = keySet }

    public init(jwks: String) throws(VerificationError) { self.keySet = try KeySet.parse(jwks: Array(jwks.utf8)) }

    public func currentKeys() -> Result<KeySet, VerificationError> { .success(keySet) }
}

/// The contract's `jwks_file`: a local JWKS document that pins a provider's keys, re-read when it changes.
///
/// The file's modification time and size are looked at no more than once a second, so the hot path pays a
/// clock read, not a `stat`. A changed file that fails to parse keeps the previous good keys and reports
/// the problem through ``lastError``; a file that never parsed answers `keys_unavailable`.
public final class JWKSFileKeySource: KeySource {
    private struct State {
        var keySet: KeySet?
        var fileStamp: FileStamp?
        var lastCheck: ContinuousClock.Instant?
        var lastError: String?
    }

    private struct FileStamp: Equatable {
        let modified: Date
        let size: Int
    }

    public let path: String
    private let state: Locked<State>
    private let recheckInterval: Duration

    public init(path: String, recheckInterval: Duration = .seconds(1)) {
        self.path = path
        self.recheckInterval = recheckInterval
        self.state = Locked(State())
        _ = currentKeys()
    }

    public var lastError: String? { state.withLock { $0.lastError } }

    public func currentKeys() -> Result<KeySet, VerificationError> {
        let now = ContinuousClock.now
        return state.withLock { state in
            if let last = state.lastCheck, now - last < recheckInterval, let keys = state.keySet { return .success(keys) }
            state.lastCheck = now
            reload(&state)
            if let keys = state.keySet { return .success(keys) }
            return .failure(VerificationError(.keysUnavailable, "pinned JWKS file unusable: \(state.lastError ?? "unknown error")"))
        }
    }

    private func reload(_ state: inout State) {
        let stamp: FileStamp
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            stamp = FileStamp(
                modified: attributes[.modificationDate] as? Date ?? .distantPast,
                size: (attributes[.size] as? NSNumber)?.intValue ?? -1)
        } catch {
            state.lastError = "cannot read \(path): \(error.localizedDescription)"
            return
        }
        if stamp == state.fileStamp { return }
        guard stamp.size <= KeySet.maximumDocumentBytes else {
            state.lastError = "\(path) is \(stamp.size) bytes; the limit is \(KeySet.maximumDocumentBytes)"
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            state.lastError = "cannot read \(path)"
            return
        }
        do {
            let keys = try KeySet.parse(jwks: Array(data))
            state.keySet = keys
            state.fileStamp = stamp
            state.lastError = nil
        } catch {
            state.lastError = "\(path): \(error.message)"
        }
    }
}
