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
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            headers[.allow] = names
            let body = JSONWriter.bytes(
                .object(JSONObject([("error", .object(JSONObject([("code", .string("invalid_request")), ("message", .string("use \(names)"))])))])))
            return Response(status: .methodNotAllowed, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        return try await next(request, context)
    }
}
