import Hummingbird
import TokenGuardCore
import TokenGuardService

/// Answers 405 (with `Allow`) for a known path asked with a method it does not serve, instead of 404:
/// the path exists, the method is what is wrong.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    let allowed: [String: [HTTPRequest.Method]]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let methods = allowed[request.uri.path], !methods.contains(request.method) {
            let names = methods.map(\.rawValue).joined(separator: ", ")
            var response = try APIError(status: .methodNotAllowed, code: .invalidRequest, message: "use \(names)").response(
                from: request, context: context)
            response.headers[.allow] = names
            return response
        }
        return try await next(request, context)
    }
}
