/// Limits and behaviour of the HTTP API (config: `server:`; defaults from the issue).
public struct ServerSettings: Sendable {
    /// Largest `POST /v1/verify` body (64 KiB).
    public var maximumVerifyBodyBytes = 64 * 1024
    /// Largest `POST /v1/verify/batch` body (4 MiB) and most items in it (1,000).
    public var maximumBatchBodyBytes = 4 * 1024 * 1024
    public var maximumBatchItems = 1_000
    /// A connection idle (or trickling a request) longer than this is closed (slow clients cannot hold sockets).
    public var idleTimeoutSeconds = 30
    /// Seconds suggested in `Retry-After` when keys or a provider are unavailable.
    public var retryAfterSeconds = 5

    public init() {}
}
