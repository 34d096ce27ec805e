import Hummingbird
import TokenGuardCore
import TokenGuardService

/// Answers 405 (with `Allow`) for a known path asked with a method it does not serve, instead of 404: the path exists,
/// the method is what is wrong.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Paths and the methods they are served with.
    let allowed: [(path: String, methods: [HTTPRequest.Method])]
    /// Paths one segment below a prefix (`/v1/notifications/` + a provider name).
    var allowedOneSegmentBelow: [(prefix: String, methods: [HTTPRequest.Method])] = []

    /// The path as the router matches it: empty segments (`//`, a trailing `/`) dropped.
    static func routed(_ path: String) -> [UInt8] {
        var out: [UInt8] = []
        for segment in path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            out.append(UInt8(ascii: "/"))
            out.append(contentsOf: segment)
        }
        return out
    }

    /// The methods a path is served with, or nil for a path that is not one of these. Compared as bytes.
    func methods(for path: String) -> [HTTPRequest.Method]? {
        let routed = Self.routed(path)
        if let entry = allowed.first(where: { $0.path.utf8.elementsEqual(routed) }) { return entry.methods }
        for entry in allowedOneSegmentBelow where routed.starts(with: entry.prefix.utf8) {
            let rest = routed.dropFirst(entry.prefix.utf8.count)
            if !rest.isEmpty && !rest.contains(UInt8(ascii: "/")) { return entry.methods }
        }
        return nil
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let methods = methods(for: request.uri.path) else { return try await next(request, context) }
        guard methods.contains(request.method) else {
            let names = methods.map(\.rawValue).joined(separator: ", ")
            var response = try APIError(status: .methodNotAllowed, code: .invalidRequest, message: "use \(names)").response(
                from: request, context: context)
            response.headers[.allow] = names
            return response
        }
        return try await next(request, context)
    }
}
