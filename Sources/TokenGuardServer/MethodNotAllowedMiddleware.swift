import Hummingbird
import TokenGuardCore
import TokenGuardService

/// Answers 405 (with `Allow`) for a known path asked with a method it does not serve, instead of 404:
/// the path exists, the method is what is wrong.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    let allowed: [String: [HTTPRequest.Method]]
    /// Paths one segment below a prefix (`/v1/notifications/` + a provider name).
    var allowedOneSegmentBelow: [String: [HTTPRequest.Method]] = [:]

    /// The methods a path is served with, or nil for a path that is not one of these. Compared as bytes.
    func methods(for path: String) -> [HTTPRequest.Method]? {
        if let methods = allowed[path] { return methods }
        for (prefix, methods) in allowedOneSegmentBelow where path.utf8.starts(with: prefix.utf8) {
            let rest = path.utf8.dropFirst(prefix.utf8.count)
            if !rest.isEmpty && !rest.contains(UInt8(ascii: "/")) { return methods }
        }
        return nil
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let methods = methods(for: request.uri.path), !methods.contains(request.method) {
            let names = methods.map(\.rawValue).joined(separator: ", ")
            var response = try APIError(status: .methodNotAllowed, code: .invalidRequest, message: "use \(names)").response(
                from: request, context: context)
            response.headers[.allow] = names
            return response
        }
        return try await next(request, context)
    }
}
