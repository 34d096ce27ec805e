import Hummingbird
import Logging
import Metrics
import NIOCore
import TokenGuardCore
import TokenGuardService

/// `POST`, `GET` and `DELETE /v1/revocations` (contract: Revocations), and Apple's server-to-server notifications at
/// `POST /v1/notifications/{provider}`.
struct RevocationRoutes: Sendable {
    let registry: VerifierRegistry
    let settings: ServerLimits
    let kinds: [String: ProviderKind]
    let logger: Logger

    static let maximumBodyBytes = 16 * 1024

    func register(on router: Router<TokenGuardRequestContext>) {
        router.post("/v1/revocations") { request, context in try await write(request, context, delete: false) }
        router.delete("/v1/revocations") { request, context in try await write(request, context, delete: true) }
        router.get("/v1/revocations") { request, _ in
            let started = ContinuousClock.now
            return try await bounded(since: started) { try await read(request) }
        }
        router.post("/v1/notifications/{provider}") { request, context in try await notification(request, context) }
    }

    /// The work after the body is read, under the request timeout like `/v1/verify`: a notification may wait on a key
    /// fetch and a revocation on its store, and neither may hold a request (or a shutdown) past the deadline (red
    /// team: a notification waiting on a hanging IdP ignored `request_timeout_seconds`).
    private func bounded(since started: ContinuousClock.Instant, _ work: @escaping @Sendable () async throws -> Response) async throws
        -> Response
    {
        try await RequestTimeout.run(RequestTimeout.Deadline(seconds: settings.requestTimeoutSeconds, started: started), work)
    }

    private var revocations: RevocationGuard {
        get throws {
            guard let revocations = registry.revocations else {
                throw APIError(status: .serviceUnavailable, code: .revocationStoreUnavailable, message: "no revocation store is configured")
            }
            return revocations
        }
    }

    /// The configured provider a request names (byte for byte) and a valid subject, from the query or a JSON body.
    private func target(provider: String?, subject: String?) throws -> (String, String) {
        guard let provider, let configured = registry.configuredName(provider) else {
            throw APIError(status: .badRequest, code: .unknownProvider, message: "provider must name a configured provider")
        }
        guard let subject, Revocation.isValidSubject(subject) else {
            throw APIError.invalidRequest("subject must be 1 to \(Revocation.maximumSubjectBytes) bytes, without NUL")
        }
        return (configured, subject)
    }

    /// Who may write: a configured admin key, or (without admin keys) a loopback peer. Returns who, for the log.
    private func authorizeWrite(_ request: Request, _ context: TokenGuardRequestContext) throws -> String {
        if let adminKeys = settings.adminKeys {
            let presented = request.headers.filter { $0.name.canonicalName == "x-tokenguard-admin-key" }.map(\.value)
            guard presented.count == 1, let keyID = adminKeys.keyID(of: presented[0]) else {
                throw APIError(status: .forbidden, code: .callerNotAllowed, message: "revocation writes need an admin key in X-Tokenguard-Admin-Key")
            }
            return "admin key \(keyID)"
        }
        let peer = context.peer
        guard peer.isLoopback else {
            throw APIError(
                status: .forbidden, code: .callerNotAllowed,
                message: "revocation writes come from this host only (or configure server.admin_keys_env)")
        }
        return "loopback peer \(peer.address)"
    }

    private func write(_ request: Request, _ context: TokenGuardRequestContext, delete: Bool) async throws -> Response {
        let started = ContinuousClock.now
        let who = try authorizeWrite(request, context)
        let revocations = try self.revocations
        if delete {
            let query = try StrictQuery.parse(request.uri.query)
            let (provider, subject) = try target(provider: query["provider"], subject: query["subject"])
            return try await bounded(since: started) {
                do {
                    _ = try await revocations.remove(provider: provider, subject: subject)
                } catch {
                    throw storeUnavailable(error)
                }
                logger.notice(
                    "revocation removed", metadata: ["provider": "\(provider)", "subject_sha256": "\(TokenHash.short(subject))", "by": "\(who)"])
                return Response(status: .noContent)
            }
        }
        let object = try await JSONRequestBody.read(
            request, context.channel, limit: Self.maximumBodyBytes, closingAfter: settings.requestTimeoutSeconds)
        for member in object.members where !["provider", "subject", "not_before"].containsBytes(member.name) {
            throw APIError.invalidRequest("unknown member \"\(member.name.excerpt(bytes: 32))\" (allowed: provider, subject, not_before)")
        }
        let (provider, subject) = try target(provider: object["provider"]?.stringValue, subject: object["subject"]?.stringValue)
        var notBefore = Int64(registry.now)
        if let value = object["not_before"], value != .null {
            guard case .integer(let seconds) = value, seconds >= 0, seconds <= NumericDate.maximum else {
                throw APIError.invalidRequest("not_before must be Unix seconds (an integer)")
            }
            notBefore = seconds
        }
        let revocation = Revocation(provider: provider, subject: subject, notBefore: notBefore)
        return try await bounded(since: started) { [notBefore] in
            do {
                try await revocations.record(revocation)
            } catch {
                throw storeUnavailable(error)
            }
            logger.notice(
                "revocation recorded",
                metadata: ["provider": "\(provider)", "subject_sha256": "\(TokenHash.short(subject))", "not_before": "\(notBefore)", "by": "\(who)"])
            return JSONResponse.make(.object(Self.json(revocation)))
        }
    }

    private func read(_ request: Request) async throws -> Response {
        let query = try StrictQuery.parse(request.uri.query)
        let (provider, subject) = try target(provider: query["provider"], subject: query["subject"])
        let found: Revocation?
        do {
            found = try await revocations.store.get(provider: provider, subject: subject)
        } catch {
            throw storeUnavailable(error)
        }
        guard let found else { throw APIError(status: .notFound, code: .invalidRequest, message: "no revocation for this subject") }
        return JSONResponse.make(.object(Self.json(found)))
    }

    static func json(_ revocation: Revocation) -> JSONObject {
        JSONObject([
            ("provider", .string(revocation.provider)), ("subject", .string(revocation.subject)), ("not_before", .integer(revocation.notBefore)),
        ])
    }

    /// The detail (SQL text, a Redis address) goes to the log, not to the caller.
    private func storeUnavailable(_ error: any Error) -> APIError {
        logger.error("revocation store error", metadata: ["error": "\(error)"])
        return APIError(
            status: .serviceUnavailable, code: .revocationStoreUnavailable, message: "the revocation store cannot answer now",
            retryAfterSeconds: settings.retryAfterSeconds)
    }

    /// Sign in with Apple server-to-server notifications: `{"payload": "<JWS>"}`, verified with the provider's keys
    /// and audiences; `consent-revoked` and `account-delete` become revocations at `event_time`.
    private func notification(_ request: Request, _ context: TokenGuardRequestContext) async throws -> Response {
        let started = ContinuousClock.now
        let requested = context.parameters.get("provider") ?? ""
        guard let provider = registry.configuredName(requested), let verifier = registry.verifiers[provider], kinds[provider] == .apple else {
            throw APIError(
                status: .notFound, code: .unknownProvider, message: "no apple provider named \"\(requested.excerpt(bytes: 64))\" is configured")
        }
        let object = try await JSONRequestBody.read(
            request, context.channel, limit: Self.maximumBodyBytes, closingAfter: settings.requestTimeoutSeconds)
        guard let payload = object["payload"]?.stringValue else { throw APIError.invalidRequest("the body must be {\"payload\": \"<JWS>\"}") }
        return try await bounded(since: started) { try await record(notification: payload, provider: provider, verifier: verifier) }
    }

    /// Counted only when the sender gets this answer: work the request timeout cut off (answered 503, and retried
    /// by Apple) is not counted again when it ends (red team: a timed-out notification counted `rejected` later).
    private static func countNotification(provider: String, type: String) {
        guard !Task.isCancelled else { return }
        Counter(label: "tokenguard_notifications_total", dimensions: [("provider", provider), ("type", type)]).increment()
    }

    private func record(notification payload: String, provider: String, verifier: TokenVerifier) async throws -> Response {
        let result = await verifier.verifyNotification(token: payload, at: registry.now)
        let event: AppleNotificationEvent
        switch result {
        case .failure(let error) where error.code.isRetryable:
            throw APIError(status: .serviceUnavailable, code: error.code, message: error.message, retryAfterSeconds: settings.retryAfterSeconds)
        case .failure(let error):
            Self.countNotification(provider: provider, type: "rejected")
            throw APIError(status: .badRequest, code: error.code, message: error.message)
        case .success(let claims):
            switch AppleNotificationEvent.parse(claims) {
            case .failure(let error):
                Self.countNotification(provider: provider, type: "rejected")
                throw APIError(status: .badRequest, code: error.code, message: error.message)
            case .success(let parsed): event = parsed
            }
        }
        Self.countNotification(provider: provider, type: event.type.rawValue)
        if event.type.revokes {
            let revocations = try self.revocations
            let revocation = Revocation(provider: provider, subject: event.subject, notBefore: event.eventTime)
            do {
                // Apple retries deliveries, and two may race: the store keeps the later time, atomically.
                try await revocations.record(revocation, onlyLater: true)
            } catch {
                throw storeUnavailable(error)
            }
        }
        logger.notice(
            "apple notification",
            metadata: [
                "provider": "\(provider)", "type": "\(event.type.rawValue)", "subject_sha256": "\(TokenHash.short(event.subject))",
                "event_time": "\(event.eventTime)",
            ])
        return JSONResponse.make(.object(JSONObject([("accepted", .bool(true)), ("type", .string(event.type.rawValue))])))
    }
}

/// A query string read strictly: `name=value` pairs split on `&`, percent-escapes decoded (`+` is a space, as form
/// encoding sends it), the result valid UTF-8 — an invalid sequence is refused, never replaced — and each name at most
/// once (a repeated `subject=` is refused rather than "first wins").
enum StrictQuery {
    static func parse(_ query: String?) throws -> [String: String] {
        var result: [String: String] = [:]
        guard let query, !query.isEmpty else { return result }
        for pair in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = try decode(parts[0])
            let value = parts.count > 1 ? try decode(parts[1]) : ""
            guard result[name] == nil else { throw APIError.invalidRequest("query parameter \(name.excerpt(bytes: 32)) is given more than once") }
            result[name] = value
        }
        return result
    }

    static func decode(_ raw: Substring.UTF8View.SubSequence) throws -> String {
        let bytes = Array(raw)
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2]) else {
                    throw APIError.invalidRequest("a malformed percent-escape in the query")
                }
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(bytes[index] == UInt8(ascii: "+") ? UInt8(ascii: " ") : bytes[index])
                index += 1
            }
        }
        guard let text = String(validating: out, as: UTF8.self) else { throw APIError.invalidRequest("the query is not valid UTF-8") }
        return text
    }
}
