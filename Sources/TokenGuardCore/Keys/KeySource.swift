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
