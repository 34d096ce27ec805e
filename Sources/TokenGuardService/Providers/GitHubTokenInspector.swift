import Foundation
import TokenGuardCore

/// GitHub OAuth app (and GitHub App user) access tokens: `POST {api_url}/applications/{client_id}/token`.
///
/// `200` means the token belongs to this app; `404`/`422` mean it does not, or is revoked or expired
/// (`token_inactive`). `401` (our credentials refused), `403`/`429` (rate limited, with `Retry-After`), `5xx`,
/// timeouts and malformed bodies are `keys_unavailable`.
package struct GitHubTokenInspector: OpaqueTokenInspector {
    package let providerName: String
    let app: OpaqueApp
    package var clientID: String { app.id }
    package var apiURL: String { app.baseURL }
    private var clientSecret: String { app.secret }
    private var fetcher: any HTTPFetching { app.fetcher }

    /// GitHub tokens are at most 255 characters of `[A-Za-z0-9_]` (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_).
    package static let maximumTokenLength = 255

    package init(
        providerName: String, clientID: String, clientSecret: String, apiURL: String = "https://api.github.com", fetcher: any HTTPFetching
    ) {
        self.init(providerName: providerName, clientID: clientID, clientSecret: SecretValue(clientSecret), apiURL: apiURL, fetcher: fetcher)
    }

    package init(
        providerName: String, clientID: String, clientSecret: SecretValue, apiURL: String = "https://api.github.com", fetcher: any HTTPFetching
    ) {
        self.providerName = providerName
        app = OpaqueApp(id: clientID, secret: clientSecret, baseURL: apiURL, fetcher: fetcher)
    }

    package func validateShape(_ token: String) -> VerificationError? {
        OpaqueTokenShape.check(
            token, maximumLength: Self.maximumTokenLength, punctuation: [UInt8(ascii: "_")],
            refusal: "not a GitHub token (at most 255 characters of A-Z, a-z, 0-9 and _)")
    }

    package func inspect(_ token: String, now: Double) async -> VerificationResult {
        let credentials = Data("\(clientID):\(clientSecret)".utf8).base64EncodedString()
        let body = JSONWriter.bytes(.object(JSONObject([("access_token", .string(token))])))
        let request = HTTPRequest(
            url: "\(apiURL)/applications/\(clientID)/token", method: .post,
            headers: [
                ("Authorization", "Basic \(credentials)"), ("Accept", "application/vnd.github+json"), ("X-GitHub-Api-Version", "2022-11-28"),
                ("Content-Type", "application/json"),
            ], body: body, maximumResponseBytes: 256 * 1024)
        let response: HTTPResponse
        do {
            response = try await fetcher.send(request)
        } catch {
            return .failure(VerificationError(.keysUnavailable, "GitHub token check failed: \(error.kind.rawValue)", retryAfterSeconds: 5))
        }
        switch response.status {
        case 200:
            return verdict(from: response, now: now)
        case 404, 422:
            // Only GitHub's own answer says so. A proxy's or load balancer's error page, or an `api_url` without its
            // path (GitHub Enterprise Server's /api/v3), answers 404 as well: that is an outage, never every user's
            // token refused.
            guard Self.isGitHubError(response) else {
                return .failure(
                    VerificationError(
                        .keysUnavailable, "GitHub's API URL answered \(response.status) without GitHub's error body", retryAfterSeconds: 5))
            }
            return .failure(VerificationError(.tokenInactive, "GitHub does not know this token for this app (revoked, expired or another app's)"))
        case 401:
            return .failure(VerificationError(.keysUnavailable, "GitHub refused our client credentials (401): check client_id and the client secret"))
        case 403, 429:
            return .failure(
                VerificationError(
                    .keysUnavailable, "GitHub rate limit reached (\(response.status))",
                    retryAfterSeconds: RetryAfter.seconds(from: response, now: now)))
        default:
            return .failure(VerificationError(.keysUnavailable, "GitHub answered \(response.status)", retryAfterSeconds: 5))
        }
    }

    /// GitHub's REST error for this endpoint: a JSON body (media type exactly `application/json`, parameters allowed)
    /// whose object has a string `message` and a `documentation_url` on docs.github.com naming the OAuth applications
    /// API or its check-a-token operation. GitHub answers an unknown route with a 404 of the same shape whose
    /// documentation is the REST API's root: that is a wrong `api_url`, an outage, never a token refused.
    static func isGitHubError(_ response: HTTPResponse) -> Bool {
        // Every Content-Type line, combined: two lines are no single media type, whichever comes last (red team 22).
        guard let type = response.combinedHeader("content-type"), isJSONMediaType(type),
            let object = try? JSONParser.parseObject(response.body), object["message"]?.stringValue != nil,
            let documentation = object["documentation_url"]?.stringValue
        else { return false }
        let url = Array(documentation.utf8)
        guard url.starts(with: "https://docs.github.com/".utf8) else { return false }
        return url.contains(Array("/apps/oauth-applications".utf8)) || url.contains(Array("#check-a-token".utf8))
    }

    /// `application/json`, in any case, alone or followed by parameters (`; charset=utf-8`); not `application/jsonp`.
    private static func isJSONMediaType(_ value: String) -> Bool {
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var essence = Array(ASCII.lowercased(value).utf8.prefix { $0 != UInt8(ascii: ";") })
        while let last = essence.last, isBlank(last) { essence.removeLast() }
        return essence.drop(while: isBlank).elementsEqual("application/json".utf8)
    }

    private func verdict(from response: HTTPResponse, now: Double) -> VerificationResult {
        guard let object = try? JSONParser.parseObject(response.body), let user = object["user"]?.objectValue,
            case .integer(let userID)? = user["id"], let login = user["login"]?.stringValue
        else {
            return .failure(VerificationError(.keysUnavailable, "GitHub answered 200 with an unexpected body", retryAfterSeconds: 5))
        }
        // Defence in depth: the authorization must name our app, byte for byte.
        if let app = object["app"] {
            guard let appClientID = app.objectValue?["client_id"]?.stringValue else {
                return .failure(VerificationError(.keysUnavailable, "GitHub answered with a malformed app", retryAfterSeconds: 5))
            }
            guard appClientID.sameBytes(as: clientID) else {
                return .failure(VerificationError(.tokenInactive, "the token was issued to another GitHub app"))
            }
        }
        var expiresAt: Int64? = nil
        switch object["expires_at"] {
        case nil, .null?:
            break  // OAuth app tokens do not expire
        case .string(let text)?:
            guard let parsed = ISO8601Time.parse(text), parsed >= 0, parsed <= NumericDate.maximum else {
                return .failure(VerificationError(.keysUnavailable, "GitHub answered with an unreadable expires_at", retryAfterSeconds: 5))
            }
            guard Double(parsed) > now else { return .failure(VerificationError(.tokenExpired, "token expired at \(UTCTime.iso8601(parsed))")) }
            expiresAt = parsed
        default:
            return .failure(VerificationError(.keysUnavailable, "GitHub answered with a malformed expires_at", retryAfterSeconds: 5))
        }
        let scopes = object["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        // Only what a caller needs: never the token, its hash or its last eight characters.
        var claims = JSONObject([
            ("login", .string(login)), ("id", .integer(userID)), ("scopes", .array(scopes.map(JSONValue.string))),
        ])
        if let name = object["app"]?.objectValue?["name"]?.stringValue { claims.set("app_name", .string(name)) }
        for field in ["created_at", "updated_at", "expires_at"] { if let value = object[field], value != .null { claims.set(field, value) } }
        return .success(
            Verdict(
                provider: providerName, subject: String(userID), userID: String(userID), issuer: "https://github.com", audience: clientID,
                expiresAt: expiresAt, issuedAt: nil, keyID: nil, email: nil, emailVerified: false, tenantID: nil, claims: claims))
    }
}
