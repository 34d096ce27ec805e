extension TokenVerifier {
    /// Notifications older than this are refused (Apple retries a failed delivery for a while; not for weeks).
    public static let maximumNotificationAgeSeconds: Int64 = 7 * 86_400

    /// Verifies a provider's signed server-to-server notification (Sign in with Apple: `{"payload": "<JWS>"}`): the
    /// provider's keys (refetched once on an unknown `kid`), algorithms, issuer and audiences; `iat` not in the future
    /// and `exp` when present. No nonce applies, and the payload must carry `events` — the reverse of an ID token.
    /// Returns the payload's claims.
    public func verifyNotification(token: String, at now: Int64) async -> Result<JSONObject, VerificationError> {
        func attempt() -> Result<JSONObject, VerificationError> {
            do throws(VerificationError) {
                try checkBytes(token)
                guard token.utf8.count <= policy.maxTokenBytes else {
                    throw VerificationError(.tokenTooLarge, "the payload is over \(policy.maxTokenBytes) bytes")
                }
                let jws = try parse(token)
                let alg = try checkAlgorithm(jws.header)
                let keys = try keySource.currentKeys().get()
                let key = try checkSignature(jws, alg: alg, keys: keys)
                try checkTokenType(jws.header)
                let claims = try payloadClaims(jws)
                let reader = ClaimsReader(claims: claims)
                _ = try checkIssuer(reader, key: key)
                _ = try checkAudience(reader)
                if try reader.numericDate(.exp) != nil { _ = try checkExpiry(reader, now: now) }
                // Required and recent: a captured notification cannot be replayed for ever.
                guard let issuedAt = try checkIssuedAt(reader, key: key, now: now) else {
                    throw VerificationError(.malformedToken, "the notification has no iat")
                }
                guard now - issuedAt <= Self.maximumNotificationAgeSeconds else {
                    throw VerificationError(.tokenExpired, "the notification was issued over \(Self.maximumNotificationAgeSeconds / 86_400) days ago")
                }
                guard claims.contains("events") else {
                    throw VerificationError(.invalidTokenType, "the payload carries no events: not a server-to-server notification")
                }
                return .success(claims.materialized())
            } catch {
                return .failure(error)
            }
        }
        let first = attempt()
        guard case .failure(let error) = first, error.code == .unknownKey || error.code == .keysUnavailable else { return first }
        let keyID = try? parse(token).header.keyID
        switch await keySource.keysAfterMiss(keyID: keyID ?? nil) {
        case nil: return first
        case .failure(let refetchError)?: return .failure(refetchError)
        case .success?: return attempt()
        }
    }
}

/// One Sign in with Apple server-to-server event (`events` in the notification payload: a JSON string or object).
public struct AppleNotificationEvent: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case emailDisabled = "email-disabled"
        case emailEnabled = "email-enabled"
        case consentRevoked = "consent-revoked"
        case accountDelete = "account-delete"

        /// The user withdrew or deleted their account: their earlier tokens are no longer good.
        public var revokes: Bool { self == .consentRevoked || self == .accountDelete }
    }

    public let type: Kind
    public let subject: String
    /// Unix seconds (Apple sends milliseconds).
    public let eventTime: Int64

    public static func parse(_ claims: JSONObject) -> Result<AppleNotificationEvent, VerificationError> {
        let events: JSONObject
        switch claims["events"] {
        case .string(let text)?:
            guard text.utf8.count <= 16 * 1024, let object = try? JSONParser.parseObject(Array(text.utf8)) else {
                return .failure(VerificationError(.malformedToken, "events is not a JSON object"))
            }
            events = object
        case .object(let object)?: events = object
        default: return .failure(VerificationError(.malformedToken, "events must be a JSON string or object"))
        }
        guard let typeName = events["type"]?.stringValue, let type = Kind(rawValue: typeName) else {
            return .failure(VerificationError(.invalidRequest, "unknown event type \"\((events["type"]?.stringValue ?? "").excerpt(bytes: 32))\""))
        }
        guard let subject = events["sub"]?.stringValue, Revocation.isValidSubject(subject) else {
            return .failure(VerificationError(.malformedToken, "events.sub is missing or not a usable subject"))
        }
        let milliseconds: Int64
        switch events["event_time"] {
        case .integer(let value)?: milliseconds = value
        case .number(let value, _)? where value.isFinite && value >= 0 && value < 1e17: milliseconds = Int64(value)
        case .string(let text)? where text.utf8.count <= 17 && text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) && !text.isEmpty:
            milliseconds = Int64(text) ?? -1
        default: return .failure(VerificationError(.malformedToken, "events.event_time must be milliseconds since 1970"))
        }
        guard milliseconds >= 0, milliseconds / 1000 <= NumericDate.maximum else {
            return .failure(VerificationError(.malformedToken, "events.event_time is out of range"))
        }
        return .success(AppleNotificationEvent(type: type, subject: subject, eventTime: milliseconds / 1000))
    }
}
