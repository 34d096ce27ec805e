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

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let segment = Self.providerSegment(request.uri.path) else { return try await next(request, context) }
        var response = await answer(request, providerSegment: String(segment))
        // A forwarded body is never read: the answer goes out at once, and asks the client to close the connection
        // rather than send the rest (what arrives meanwhile is discarded, bounded by the idle timeout).
        if request.headers[.transferEncoding] != nil || (request.headers[.contentLength].flatMap { Int($0) } ?? 0) > 0 {
            response.headers[.connection] = "close"
        }
        return request.method == .head ? Response(status: response.status, headers: response.headers, body: .init()) : response
    }

    private func answer(_ request: Request, providerSegment: String) async -> Response {
        guard let provider = registry.configuredName(providerSegment) else {
            metrics.countForwardAuth(provider: "", result: .failure(VerificationError(.unknownProvider, "")))
            return APIError(
                status: .notFound, code: .unknownProvider, message: "no provider named \"\(providerSegment.excerpt(bytes: 64))\" is configured"
            )
            .response
        }
        let policy = registry.forwardAuthPolicy(provider)
        let headers = request.headers.map { (name: $0.name.canonicalName, value: $0.value) }
        let registry = self.registry
        let maxTokenBytes = registry.maxTokenBytes
        let started = DispatchTime.now()
        let credentials = ForwardAuthCredentials.read(headers, policy: policy, maxTokenBytes: maxTokenBytes)
        let result: VerificationResult
        switch credentials {
        case .failure(let error): result = .failure(error)
        case .success(let presented):
            // A verdict that needs no waiting (a cached token, or keys in hand) is answered in this task; only the rest
            // runs under the request timeout's task.
            if let now = registry.verifyWithoutWaiting(provider: provider, token: presented.token, nonce: presented.nonce, claimReplay: false) {
                result = now
            } else {
                result = await RequestTimeout.result(seconds: settings.requestTimeoutSeconds) {
                    await registry.verify(
                        provider: provider, token: presented.token, nonce: presented.nonce, at: nil, explain: false, claimReplay: false
                    ).result
                }
            }
        }
        metrics.record(provider: provider, result: result, startedAt: started)
        return respond(result, provider: provider, policy: policy)
    }

    private func respond(_ result: VerificationResult, provider: String, policy: ForwardAuthPolicy) -> Response {
        var headers = HTTPFields()
        headers[ForwardAuthHeaders.provider] = provider
        switch result {
        case .success(let verdict):
            metrics.countForwardAuth(provider: provider, result: result)
            headers[ForwardAuthHeaders.verdict] = "valid"
            let (claims, omitted) = policy.claimHeaderValues(for: verdict)
            for (name, value) in claims {
                // Names were validated at config load; a name HTTPFields would refuse is left out rather than trusted.
                if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
            }
            if omitted > 0 {
                Counter(label: "tokenguard_forward_auth_claim_headers_omitted_total", dimensions: [("provider", provider)]).increment(by: omitted)
            }
            headers[.contentLength] = "0"
            return Response(status: .ok, headers: headers)
        case .failure(let error):
            metrics.countForwardAuth(provider: provider, result: result)
            headers[ForwardAuthHeaders.verdict] = error.code.rawValue
            if policy.mode == .shadow {
                headers[.contentLength] = "0"
                return Response(status: .ok, headers: headers)
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
            return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
    }

}
