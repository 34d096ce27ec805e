import Foundation
import TokenGuardCore
import TokenGuardCrypto

/// Classic Facebook Login user access tokens, through the Graph API's `debug_token` with the app access token
/// (`APP_ID|APP_SECRET`) and `appsecret_proof` (HMAC-SHA256 of the app access token, keyed by the app secret).
///
/// Valid only if `is_valid` is true, `app_id` is ours, the token is a `USER` token and `expires_at` (when not 0)
/// is in the future. An invalid token or another app's is `token_inactive`; Graph errors, timeouts and malformed
/// bodies are `keys_unavailable`.
package struct FacebookLoginTokenInspector: OpaqueTokenInspector {
    package let providerName: String
    let app: OpaqueApp
    package var appID: String { app.id }
    package var graphURL: String { app.baseURL }
    private var appSecret: String { app.secret }
    private var fetcher: any HTTPFetching { app.fetcher }

    package static let maximumTokenLength = 1024

    package init(
        providerName: String, appID: String, appSecret: String, graphURL: String = "https://graph.facebook.com", fetcher: any HTTPFetching
    ) {
        self.init(providerName: providerName, appID: appID, appSecret: SecretValue(appSecret), graphURL: graphURL, fetcher: fetcher)
    }

    package init(
        providerName: String, appID: String, appSecret: SecretValue, graphURL: String = "https://graph.facebook.com", fetcher: any HTTPFetching
    ) {
        self.providerName = providerName
        app = OpaqueApp(id: appID, secret: appSecret, baseURL: graphURL, fetcher: fetcher)
    }

    package func validateShape(_ token: String) -> VerificationError? {
        OpaqueTokenShape.check(
            token, maximumLength: Self.maximumTokenLength, punctuation: [UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: ".")],
            refusal: "not a Facebook access token")
    }

    /// `appsecret_proof`: lowercase hex HMAC-SHA256 of the app access token, keyed by the app secret.
    static func appSecretProof(appAccessToken: String, appSecret: String) -> String {
        Hex.lowercase(HMAC.sha256(key: Array(appSecret.utf8), message: Array(appAccessToken.utf8)))
    }

    package func inspect(_ token: String, now: Double) async -> VerificationResult {
        let appToken = "\(appID)|\(appSecret)"
        let proof = Self.appSecretProof(appAccessToken: appToken, appSecret: appSecret)
        let query = [("input_token", token), ("access_token", appToken), ("appsecret_proof", proof)]
            .map { "\($0.0)=\(Self.percentEncode($0.1))" }.joined(separator: "&")
        let response: HTTPResponse
        do {
            response = try await fetcher.send(HTTPRequest(url: "\(graphURL)/debug_token?\(query)", maximumResponseBytes: 256 * 1024))
        } catch {
            return .failure(VerificationError(.keysUnavailable, "Graph debug_token failed: \(error.kind.rawValue)", retryAfterSeconds: 5))
        }
        guard let object = try? JSONParser.parseObject(response.body) else {
            return .failure(VerificationError(.keysUnavailable, "Graph answered \(response.status) with an unreadable body", retryAfterSeconds: 5))
        }
        if let graphError = object["error"]?.objectValue {
            // Graph's own message is not echoed: report its type and code only.
            let type = graphError["type"]?.stringValue?.excerpt(bytes: 64) ?? "unknown"
            let code = graphError["code"].map { JSONWriter.string($0).excerpt(bytes: 32) } ?? "?"
            return .failure(VerificationError(.keysUnavailable, "Graph error (\(type), code \(code), HTTP \(response.status))", retryAfterSeconds: 5))
        }
        guard response.status == 200, let data = object["data"]?.objectValue else {
            return .failure(VerificationError(.keysUnavailable, "Graph answered \(response.status) without data", retryAfterSeconds: 5))
        }
        // Fields that decide validity must be present with the right type: anything else is a malformed answer
        // (an outage to the caller), never "absent".
        func malformed(_ field: String) -> VerificationResult {
            .failure(VerificationError(.keysUnavailable, "Graph answered with a malformed \(field)", retryAfterSeconds: 5))
        }
        guard let isValid = data["is_valid"]?.boolValue else { return malformed("is_valid") }
        guard isValid else {
            return .failure(VerificationError(.tokenInactive, "Facebook says the token is not valid (expired, revoked or malformed)"))
        }
        guard let tokenAppID = data["app_id"]?.stringValue else { return malformed("app_id") }
        guard tokenAppID.sameBytes(as: appID) else {
            return .failure(VerificationError(.tokenInactive, "the token was issued to another Facebook app"))
        }
        guard let type = data["type"]?.stringValue else { return malformed("type") }
        guard type.sameBytes(as: "USER") else {
            return .failure(VerificationError(.tokenInactive, "not a user access token (type \(type.excerpt(bytes: 32)))"))
        }
        var expiresAt: Int64? = nil
        switch data["expires_at"] {
        case nil, .integer(0)?:
            break  // 0: a token that does not expire (long-lived page tokens)
        case .integer(let seconds)? where seconds > 0 && seconds <= NumericDate.maximum:
            guard Double(seconds) > now else { return .failure(VerificationError(.tokenExpired, "token expired at \(UTCTime.iso8601(seconds))")) }
            expiresAt = seconds
        default:
            return malformed("expires_at")
        }
        // A user id no revocation could name is no answer: an upstream value never makes an unrevocable identity.
        guard let userID = data["user_id"]?.stringValue, Revocation.isValidSubject(userID) else {
            return .failure(VerificationError(.keysUnavailable, "Graph answered without a usable user_id", retryAfterSeconds: 5))
        }
        var claims = JSONObject([("user_id", .string(userID)), ("app_id", .string(tokenAppID))])
        for field in ["application", "scopes", "granular_scopes", "expires_at", "data_access_expires_at", "issued_at"] {
            if let value = data[field] { claims.set(field, value) }
        }
        var issuedAt: Int64? = nil
        switch data["issued_at"] {
        case nil: break
        case .integer(let seconds)? where seconds >= 0 && seconds <= NumericDate.maximum: issuedAt = seconds
        default: return malformed("issued_at")
        }
        return .success(
            Verdict(
                provider: providerName, subject: userID, userID: userID, issuer: "https://www.facebook.com", audience: appID, expiresAt: expiresAt,
                issuedAt: issuedAt, keyID: nil, email: nil, emailVerified: false, tenantID: nil, claims: claims))
    }

    static func percentEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case 48...57, 65...90, 97...122, 45, 46, 95, 126: out.unicodeScalars.append(UnicodeScalar(byte))
            default: out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
}
