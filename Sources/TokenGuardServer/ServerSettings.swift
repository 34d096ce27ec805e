import TokenGuardCore
import TokenGuardService

/// Limits and behaviour of the HTTP API (config `server:`; defaults from the contract's issue).
public struct ServerSettings: Sendable {
    /// Largest `POST /v1/verify` body (64 KiB).
    public var maximumVerifyBodyBytes = 64 * 1024
    /// Largest `POST /v1/verify/batch` body (4 MiB) and most items in it (1,000).
    public var maximumBatchBodyBytes = 4 * 1024 * 1024
    public var maximumBatchItems = 1_000
    /// A request not answered within this time gets 503 (15 s).
    public var requestTimeoutSeconds = 15
    /// A connection idle (or trickling a request) longer than this is closed (slow clients cannot hold sockets).
    public var idleTimeoutSeconds = 30
    /// Seconds suggested in `Retry-After` when keys or a provider are unavailable.
    public var retryAfterSeconds = 5
    /// When set, `/v1/` requests need `X-Tokenguard-Key` (config `server.caller_keys_env` / `caller_keys_file`).
    public var callerKeys: CallerKeys? = nil

    public init() {}

    public init(_ limits: ServerLimits) {
        maximumVerifyBodyBytes = limits.maximumVerifyBodyBytes
        maximumBatchBodyBytes = limits.maximumBatchBodyBytes
        maximumBatchItems = limits.maximumBatchItems
        requestTimeoutSeconds = limits.requestTimeoutSeconds
        idleTimeoutSeconds = limits.idleTimeoutSeconds
        callerKeys = limits.callerKeys
    }
}
