import Foundation
import Logging
import Metrics
import TokenGuardCore
import TokenGuardCrypto

/// Verifies an opaque access token by asking its provider (GitHub, classic Facebook Login).
///
/// The point is not only "is this token alive" but "was it issued to *our* app": a token another app obtained
/// must not sign anyone in here. Provider faults (our credentials refused, rate limits, 5xx, timeouts, garbage)
/// are `keys_unavailable` — retryable, never a rejection.
package protocol OpaqueTokenInspector: Sendable {
    var providerName: String { get }
    /// Checks that the token has a plausible shape before anything is sent to the provider.
    func validateShape(_ token: String) -> VerificationError?
    func inspect(_ token: String, now: Double) async -> VerificationResult
}

/// Wraps an inspector with the bounded answer cache and logging (a short hash of the token, never the token).
package struct OpaqueTokenVerifier: Sendable {
    package let inspector: any OpaqueTokenInspector
    package let cache: OpaqueVerdictCache
    package let limiter: InspectionLimiter
    private let logger: Logger
    private let clock: WallClock
    /// Made once: a cached answer is counted without a lookup in the metrics registry under its lock.
    private let cacheHits: Counter
    private let inspectionsRefused: Counter

    package init(
        inspector: any OpaqueTokenInspector, cache: OpaqueVerdictCache = OpaqueVerdictCache(), limits: InspectionLimiter.Limits = .init(),
        logger: Logger = Logger(label: "tokenguard.opaque"), clock: WallClock = .system
    ) {
        self.inspector = inspector
        self.cache = cache
        self.limiter = InspectionLimiter(limits: limits, now: clock.now)
        self.logger = logger
        self.clock = clock
        cacheHits = Counter(label: "tokenguard_cache_hits_total", dimensions: [("provider", inspector.providerName), ("cache", "opaque")])
        inspectionsRefused = Counter(label: "tokenguard_inspections_refused_total", dimensions: [("provider", inspector.providerName)])
    }

    package func verify(token: String) async -> VerificationResult {
        if let error = inspector.validateShape(token) { return .failure(error) }
        let now = clock.now
        if let cached = cache.lookup(token, now: now) {
            cacheHits.increment()
            return cached
        }
        if let reason = limiter.acquire(now: now) {
            inspectionsRefused.increment()
            return .failure(
                VerificationError(.keysUnavailable, "\(inspector.providerName) token inspection is busy: \(reason)", retryAfterSeconds: 1))
        }
        let result = await inspector.inspect(token, now: now)
        limiter.release()
        cache.store(token, result, now: now)
        // A cancelled request (answered by its timeout, or a shutdown) ended its inspection itself: no upstream fault.
        if case .failure(let error) = result, error.code.isRetryable, !Task.isCancelled {
            logger.warning(
                "token inspection unavailable",
                metadata: ["provider": "\(inspector.providerName)", "token_sha256": "\(TokenHash.short(token))", "error": "\(error.message)"])
        }
        return result
    }
}

/// A short, non-reversible identifier for a token in logs: the first 12 hex digits of its SHA-256.
package enum TokenHash {
    package static func short(_ token: String) -> String { String(SHA256.hexDigest(token.utf8).prefix(12)) }
}

enum RetryAfter {
    /// Seconds to wait from `Retry-After` (seconds) or `x-ratelimit-reset` (epoch seconds), bounded to [1, 3600].
    /// Advisory values: anything unreadable (`nan`, `inf`, `1e300`, signs, fractions) falls back to 60 s; nothing
    /// an upstream sends reaches a conversion that could trap.
    static func seconds(from response: HTTPResponse, now: Double) -> Int {
        if let value = response.header("retry-after"), let seconds = decimal(value) { return min(max(seconds, 1), 3600) }
        if let value = response.header("x-ratelimit-reset"), let reset = decimal(value), now.isFinite {
            let wait = Double(reset) - now
            return wait.isFinite ? Int(min(max(wait, 1), 3600)) : 60
        }
        return 60
    }

    /// A non-negative decimal integer of at most 12 digits, or nil.
    static func decimal(_ text: String) -> Int? {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 12, bytes.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        return bytes.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
    }
}

/// ISO 8601 `2026-01-01T00:00:00Z` (GitHub's timestamps) to Unix seconds, without Foundation's formatters.
enum ISO8601Time {
    static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40, bytes[4] == 45, bytes[7] == 45, bytes[10] == 84, bytes[13] == 58, bytes[16] == 58 else {
            return nil
        }
        // Digits only: Int64("+1") would accept a sign.
        func number<C: Collection<UInt8>>(_ digits: C) -> Int64? {
            guard !digits.isEmpty, digits.allSatisfy({ (48...57).contains($0) }) else { return nil }
            return digits.reduce(0) { $0 * 10 + Int64($1 - 48) }
        }
        guard let year = number(bytes[0..<4]), let month = number(bytes[5..<7]), let day = number(bytes[8..<10]),
            let hour = number(bytes[11..<13]), let minute = number(bytes[14..<16]), let second = number(bytes[17..<19]),
            (1...12).contains(month), (1...31).contains(day), hour <= 23, minute <= 59, second <= 60
        else { return nil }
        var offset: Int64 = 0
        let zone = Array(bytes[19...].drop { $0 == 46 || (48...57).contains($0) })  // skip fractional seconds
        if zone.first == 43 || zone.first == 45, zone.count == 6, zone[3] == 58, let h = number(zone[1..<3]), let m = number(zone[4..<6]),
            h <= 23, m <= 59
        {
            offset = (h * 3600 + m * 60) * (zone.first == 43 ? 1 : -1)
        } else if zone != [90] {
            return nil
        }
        // Days from civil (Howard Hinnant).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return days * 86_400 + hour * 3600 + minute * 60 + second - offset
    }
}

/// The shape check both inspectors apply before anything is sent to a provider: non-empty, bounded, ASCII letters
/// and digits plus a few punctuation bytes (tokens are bytes; nothing else reaches an upstream or a cache).
enum OpaqueTokenShape {
    static func check(_ token: String, maximumLength: Int, punctuation: Set<UInt8>, refusal: String) -> VerificationError? {
        let fits =
            !token.isEmpty && token.utf8.count <= maximumLength
            && token.utf8.allSatisfy { (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) || punctuation.contains($0) }
        return fits ? nil : VerificationError(.malformedToken, refusal)
    }
}

/// What both inspectors hold: our app's id and secret at the provider, the provider's API base URL (without a
/// trailing slash), and the HTTP client that reaches it.
struct OpaqueApp: Sendable {
    let id: String
    let baseURL: String
    let fetcher: any HTTPFetching
    private let secretValue: SecretValue
    /// Read at each call: a secret from a file rotates without a restart.
    var secret: String { secretValue.current }

    init(id: String, secret: SecretValue, baseURL: String, fetcher: any HTTPFetching) {
        self.id = id
        self.secretValue = secret
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.fetcher = fetcher
    }
}
