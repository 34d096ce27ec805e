import Dispatch
import HTTPTypes
import Hummingbird
import Metrics
import NIOCore
import TokenGuardCore
import TokenGuardService

enum ForwardAuthHeaders {
    static let provider = HTTPField.Name("X-Tokenguard-Provider")!
    static let verdict = HTTPField.Name("X-Tokenguard-Verdict")!
}

/// Gateway checks (contract: Forward-auth): `/v1/authz/{provider}` and every path below it, any method, answered
/// from the request's headers alone — the body is never read. Runs as a middleware so that every method and every
/// path below the provider reach it; the provider is the third path segment, byte for byte, and nothing after it
/// (the gateway's original path) has any say in the verdict.
struct ForwardAuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let check: ForwardAuthCheck

    static var prefix: String { ForwardAuthCheck.prefix }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let segment = ForwardAuthCheck.providerSegment(request.uri.path) else { return try await next(request, context) }
        let headers = request.headers.map { (name: $0.name.canonicalName, value: $0.value) }
        var response = await check.answer(providerSegment: String(segment), headers: headers).response
        // A forwarded body is never read: the answer goes out at once, and asks the client to close the connection
        // rather than send the rest (what arrives meanwhile is discarded, bounded by the idle timeout). A Content-Length
        // that does not read as exactly 0 counts as a body.
        let hasBody =
            request.headers.contains(.transferEncoding) || (request.headers.contains(.contentLength) && request.headers.announcedContentLength != 0)
        if hasBody {
            response.headers[.connection] = "close"
        }
        return request.method == .head ? Response(status: response.status, headers: response.headers, body: .init()) : response
    }
}

/// The forward-auth decision, from the provider segment and the request's header fields: made once at start, used by
/// ``ForwardAuthMiddleware`` and by ``VerifyOnTheEventLoop``.
struct ForwardAuthCheck: Sendable {
    let registry: VerifierRegistry
    let settings: ServerLimits
    let metrics: ServiceMetrics

    static var prefix: String { "/v1/authz" }

    /// The provider segment of a forward-auth path, "" when it has none, nil when the path is not a forward-auth path.
    static func providerSegment(_ path: String) -> Substring? {
        let bytes = path.utf8
        guard bytes.starts(with: prefix.utf8) else { return nil }
        let rest = path.utf8.dropFirst(prefix.utf8.count)
        guard let first = rest.first else { return "" }
        guard first == UInt8(ascii: "/") else { return nil }
        let segment = rest.dropFirst().prefix { $0 != UInt8(ascii: "/") }
        return Substring(segment)
    }

    enum Immediate {
        case answer(JSONAnswer)
        /// The verification must wait (keys to fetch, an opaque provider): nothing was counted yet.
        case waitFor(provider: String, policy: ForwardAuthPolicy, presented: ForwardAuthCredentials, started: DispatchTime)
    }

    /// The answer when it needs no waiting: an unknown provider, missing or malformed credentials, a cached token or
    /// keys in hand.
    func answerWithoutWaiting(providerSegment: String, headers: [(name: String, value: String)]) -> Immediate {
        guard let provider = registry.configuredName(providerSegment) else {
            metrics.countForwardAuth(provider: "", result: .failure(VerificationError(.unknownProvider, "")))
            return .answer(
                APIError(
                    status: .notFound, code: .unknownProvider, message: "no provider named \"\(providerSegment.excerpt(bytes: 64))\" is configured"
                )
                .answer)
        }
        let policy = registry.forwardAuthPolicy(provider)
        let started = DispatchTime.now()
        let result: VerificationResult
        switch ForwardAuthCredentials.read(headers, policy: policy, maxTokenBytes: registry.maxTokenBytes) {
        case .failure(let error): result = .failure(error)
        case .success(let presented):
            guard let now = registry.verifyWithoutWaiting(provider: provider, token: presented.token, nonce: presented.nonce, claimReplay: false)
            else { return .waitFor(provider: provider, policy: policy, presented: presented, started: started) }
            result = now
        }
        metrics.record(provider: provider, result: result, startedAt: started)
        return .answer(answer(result, provider: provider, policy: policy))
    }

    func answer(providerSegment: String, headers: [(name: String, value: String)]) async -> JSONAnswer {
        switch answerWithoutWaiting(providerSegment: providerSegment, headers: headers) {
        case .answer(let answer): return answer
        case .waitFor(let provider, let policy, let presented, let started):
            // Only what must wait runs under the request timeout's task.
            let registry = self.registry
            let result = await RequestTimeout.result(RequestTimeout.Deadline(seconds: settings.requestTimeoutSeconds)) {
                await registry.verify(
                    provider: provider, token: presented.token, nonce: presented.nonce, at: nil, explain: false, claimReplay: false
                ).result
            }
            metrics.record(provider: provider, result: result, startedAt: started)
            return answer(result, provider: provider, policy: policy)
        }
    }

    private func answer(_ verification: VerificationResult, provider: String, policy: ForwardAuthPolicy) -> JSONAnswer {
        var result = verification
        var claimHeaders: (values: [(name: String, value: String)], omitted: Int) = ([], 0)
        if case .success(let verdict) = verification {
            let written = policy.claimHeaderValues(for: verdict)
            if let unsent = written.unsent {
                result = .failure(
                    VerificationError(
                        .malformedToken,
                        "the verdict's \(unsent) header does not fit (\(ForwardAuthPolicy.maximumClaimValueBytes) bytes a value, "
                            + "\(ForwardAuthPolicy.maximumClaimHeaderBytes) all claim headers): no upstream gets a verified request without it"))
            } else {
                claimHeaders = (written.headers, written.omitted)
            }
        }
        metrics.countForwardAuth(provider: provider, result: result)
        // Each field appended once (no search for an earlier one of its name: there is none).
        var headers = HTTPFields()
        headers.reserveCapacity(4 + claimHeaders.values.count)
        // Every answer carries the verdict, and a 200 the user's claims: a gateway's cache must not replay them.
        headers.append(HTTPField(name: .cacheControl, value: "no-store"))
        headers.append(HTTPField(name: ForwardAuthHeaders.provider, value: provider))
        switch result {
        case .success:
            headers.append(HTTPField(name: ForwardAuthHeaders.verdict, value: "valid"))
            let (claims, omitted) = claimHeaders
            for (name, value) in claims {
                // Names were validated at config load; a name HTTPFields would refuse is left out rather than trusted.
                if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
            }
            if omitted > 0 {
                Counter(label: "tokenguard_forward_auth_claim_headers_omitted_total", dimensions: [("provider", provider)]).increment(by: omitted)
            }
            headers.append(HTTPField(name: .contentLength, value: "0"))
            return JSONAnswer(status: .ok, headers: headers, body: [])
        case .failure(let error):
            headers.append(HTTPField(name: ForwardAuthHeaders.verdict, value: error.code.rawValue))
            if policy.mode == .shadow {
                headers.append(HTTPField(name: .contentLength, value: "0"))
                return JSONAnswer(status: .ok, headers: headers, body: [])
            }
            let status: HTTPResponse.Status
            if error.code.isRetryable {
                status = .serviceUnavailable
                headers[.retryAfter] = String(error.retryAfterSeconds ?? settings.retryAfterSeconds)
            } else {
                // Every refusal is a 401, invalid requests included: nginx's auth_request turns any other 4xx into 500.
                status = .unauthorized
                headers[.wwwAuthenticate] =
                    error.code == .tokenMissing
                    ? "Bearer realm=\"tokenguard\"" : "Bearer error=\"invalid_token\", error_description=\"\(error.code.rawValue)\""
            }
            headers[.contentType] = "application/json"
            let body = JSONWriter.bytes(
                .object(
                    JSONObject([
                        ("error", .object(JSONObject([("code", .string(error.code.rawValue)), ("message", .string(error.message))])))
                    ])))
            return JSONAnswer(status: status, headers: headers, body: body)
        }
    }
}
