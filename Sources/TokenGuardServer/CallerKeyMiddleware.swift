import Hummingbird
import TokenGuardCore

/// Refuses `/v1/` requests without a configured caller key in `X-Tokenguard-Key` (403 `caller_not_allowed`),
/// before any body is read. `/healthz`, `/readyz` and `/metrics` stay open, and so does `/v1/notifications/`
/// (a provider cannot send our header; its signed payload is its credential).
struct CallerKeyMiddleware<Context: RequestContext>: RouterMiddleware {
    let keys: CallerKeys

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path.utf8.starts(with: "/v1/".utf8), !path.utf8.starts(with: "/v1/notifications/".utf8) else {
            return try await next(request, context)
        }
        let presented = request.headers.filter { $0.name.canonicalName == "x-tokenguard-key" }.map(\.value)
        // Exactly one header with a configured key; two headers are refused rather than "first wins".
        guard presented.count == 1, keys.allows(presented[0]) else {
            throw APIError(
                status: .forbidden, code: .callerNotAllowed,
                message: presented.isEmpty ? "this service needs a caller key in X-Tokenguard-Key" : "the caller key is not accepted")
        }
        return try await next(request, context)
    }
}
