import HTTPTypes
import Hummingbird
import TokenGuardCore
import TokenGuardService

/// Refuses requests without a configured caller key in `X-Tokenguard-Key` (403 `caller_not_allowed`), before any
/// body is read.
///
/// Deny by default: every path needs a key except the exact open ones — `/healthz`, `/readyz`, `/metrics` (probes
/// and scrapers) and `/v1/notifications/{provider}` (a provider cannot send our header; its signed payload is its
/// credential). Matching a prefix of the raw path would miss what the router reaches anyway (`//v1/verify`).
struct CallerKeyMiddleware<Context: RequestContext>: RouterMiddleware {
    let keys: CallerKeys

    static var openPaths: [String] { ["/healthz", "/readyz", "/metrics"] }

    /// True for a path that needs no caller key: byte-exact, no empty, `.` or `..` segment, no percent-encoding.
    static func isOpen(_ path: String) -> Bool {
        if openPaths.containsBytes(path) { return true }
        let segments = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        // "", "v1", "notifications", provider
        guard segments.count == 4, segments[0].isEmpty, segments[1].sameBytes(as: "v1"), segments[2].sameBytes(as: "notifications") else {
            return false
        }
        let provider = segments[3]
        return !provider.isEmpty && provider != "." && provider != ".." && provider.utf8.allSatisfy { CompactJWSAlphabet.isAllowed($0) }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if Self.isOpen(request.uri.path) { return try await next(request, context) }
        guard Self.allows(keys, request.headers) else {
            throw APIError(
                status: .forbidden, code: .callerNotAllowed,
                message: request.headers[.callerKey] == nil ? "this service needs a caller key in X-Tokenguard-Key" : "the caller key is not accepted"
            )
        }
        return try await next(request, context)
    }

    /// Exactly one `X-Tokenguard-Key` field, with a configured key; two fields are refused rather than "first wins".
    static func allows(_ keys: CallerKeys, _ fields: HTTPFields) -> Bool {
        let presented = fields[values: .callerKey]
        return presented.count == 1 && keys.allows(presented[0])
    }
}

extension HTTPField.Name {
    static let callerKey = HTTPField.Name("X-Tokenguard-Key")!
}
