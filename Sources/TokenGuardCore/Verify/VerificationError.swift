/// The contract's stable error codes. The raw value is the wire string; it doubles as a bounded metric label.
public enum ErrorCode: String, Sendable, CaseIterable, Codable {
    case malformedToken = "malformed_token"
    case tokenTooLarge = "token_too_large"
    case unsupportedAlgorithm = "unsupported_algorithm"
    case unknownKey = "unknown_key"
    case invalidSignature = "invalid_signature"
    case invalidIssuer = "invalid_issuer"
    case invalidAudience = "invalid_audience"
    case tokenExpired = "token_expired"
    case tokenNotYetValid = "token_not_yet_valid"
    case tokenIssuedInFuture = "token_issued_in_future"
    case nonceMissing = "nonce_missing"
    case nonceMismatch = "nonce_mismatch"
    case tenantNotAllowed = "tenant_not_allowed"
    case tokenInactive = "token_inactive"
    case tokenReplayed = "token_replayed"
    case replayStoreUnavailable = "replay_store_unavailable"
    case keysUnavailable = "keys_unavailable"
    case invalidRequest = "invalid_request"
    case unknownProvider = "unknown_provider"
    /// 401: the token's `typ` is not one this provider accepts (an `at+jwt` access token sent as an ID token).
    case invalidTokenType = "invalid_token_type"
    /// 403: caller keys are configured and the request carries none or a wrong one.
    case callerNotAllowed = "caller_not_allowed"
    /// 401: a revocation is recorded for this subject at or after the token's `iat`.
    case tokenRevoked = "token_revoked"
    /// 503: revocations could not be read for longer than `revocations.max_staleness_seconds`; nothing is accepted.
    case revocationStoreUnavailable = "revocation_store_unavailable"
    /// 401, forward-auth only: the request carries no token (no `Authorization`, token header or cookie).
    case tokenMissing = "token_missing"
    /// 503: the request was not answered within `server.request_timeout_seconds` (retryable; not a verdict).
    case requestTimeout = "request_timeout"

    /// True for answers that mean "cannot decide now": never to be shown as a rejected token.
    public var isRetryable: Bool {
        self == .keysUnavailable || self == .replayStoreUnavailable || self == .requestTimeout || self == .revocationStoreUnavailable
    }
}

/// Why a token was not accepted: a stable code and a human message that never contains the token or nonce.
public struct VerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: ErrorCode
    public let message: String
    /// For retryable answers: when to try again, in seconds (the HTTP API's `Retry-After`).
    public let retryAfterSeconds: Int?

    public init(_ code: ErrorCode, _ message: String, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// Equality looks at the code only, so tests can compare against a code without the wording.
    public static func == (lhs: VerificationError, rhs: VerificationError) -> Bool { lhs.code == rhs.code }
}

extension StringProtocol {
    /// At most `limit` UTF-8 bytes of this text, cut at a Unicode scalar boundary, with "…" when cut: how hostile text
    /// is quoted in a message. A bound in `Character`s bounds nothing, since one grapheme cluster can be any number of
    /// combining scalars.
    package func excerpt(bytes limit: Int) -> String {
        if utf8.count <= limit { return String(self) }
        var used = 0
        var end = startIndex
        for scalar in unicodeScalars {
            let width = UTF8.width(scalar)
            if used + width > limit { break }
            used += width
            end = unicodeScalars.index(after: end)
        }
        return String(self[..<end]) + "…"
    }
}
