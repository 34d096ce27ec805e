/// A key source that cannot supply keys, answering `keys_unavailable` with its reason (never a rejection).
///
/// Used for providers whose keys live at a `jwks_url` while this build has no HTTPS fetcher, so that a
/// verification honestly says "cannot decide now" instead of inventing a verdict.
public struct UnavailableKeySource: KeySource {
    public let reason: String

    public init(reason: String) { self.reason = reason }

    public func currentKeys() -> Result<KeySet, VerificationError> { .failure(VerificationError(.keysUnavailable, reason)) }
}
