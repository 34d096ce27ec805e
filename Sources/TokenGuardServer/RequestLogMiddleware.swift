import Hummingbird
import Logging
import TokenGuardCore

/// Logs each request at debug level: method, path and status — never the query string (it can hold OAuth codes or
/// tokens, RFC 6750 allows `access_token=`), and for gateway checks only `/v1/authz/{provider}` (what follows is the
/// client's own URL).
struct RequestLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard context.logger.logLevel <= .debug else { return try await next(request, context) }
        var path = request.uri.path
        if let provider = ForwardAuthCheck.providerSegment(path) { path = "\(ForwardAuthMiddleware<Context>.prefix)/\(provider)" }
        path = String(path.excerpt(bytes: 256))
        do {
            let response = try await next(request, context)
            context.logger.debug("request", metadata: ["method": "\(request.method)", "path": "\(path)", "status": "\(response.status.code)"])
            return response
        } catch {
            context.logger.debug("request failed", metadata: ["method": "\(request.method)", "path": "\(path)"])
            throw error
        }
    }
}
