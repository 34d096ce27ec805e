import Hummingbird
import NIOCore
import TokenGuardCore
import TokenGuardService

/// A JSON error response with a stable code: `{"error": {"code": "...", "message": "..."}}`.
struct APIError: Error, HTTPResponseError {
    let status: HTTPResponse.Status
    let code: ErrorCode
    let message: String
    var retryAfterSeconds: Int? = nil
    /// Whether the connection closes after this answer (always for 413: the body is left unread).
    var closesConnection = false

    static func invalidRequest(_ message: String) -> APIError { APIError(status: .badRequest, code: .invalidRequest, message: message) }

    func response(from request: Request, context: some RequestContext) throws -> Response { response }

    var response: Response { answer.response }

    var answer: JSONAnswer {
        var headers = HTTPFields.jsonAnswer
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        // A body refused for its size is left unread: close the connection rather than read or drain it.
        if status == .contentTooLarge || closesConnection { headers[.connection] = "close" }
        let body = JSONWriter.bytes(
            .object(JSONObject([("error", .object(JSONObject([("code", .string(code.rawValue)), ("message", .string(message))])))])))
        return JSONAnswer(status: status, headers: headers, body: body)
    }
}

/// An answer as status, header fields and body bytes: what the router sends as a ``Response``, or what
/// ``VerifyOnTheEventLoop`` writes itself.
struct JSONAnswer {
    var status: HTTPResponse.Status
    var headers: HTTPFields
    var body: [UInt8]

    /// A JSON body (its `Content-Type` set).
    static func json(_ bytes: [UInt8], status: HTTPResponse.Status = .ok) -> JSONAnswer {
        JSONAnswer(status: status, headers: .jsonAnswer, body: bytes)
    }

    var response: Response {
        Response(status: status, headers: headers, body: body.isEmpty ? .init() : .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

enum JSONResponse {
    static func make(_ value: JSONValue, status: HTTPResponse.Status = .ok, retryAfter: Int? = nil) -> Response {
        var headers = HTTPFields.jsonAnswer
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: JSONWriter.bytes(value))))
    }

    /// JSON text already written (a verdict's).
    static func make(bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: .jsonAnswer, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}

extension HTTPFields {
    /// A JSON answer's fields. A verdict names a user and an error belongs to one request: no shared or private cache
    /// may keep either (`no-store`), or a proxy could hand one caller's identity to the next.
    static let jsonAnswer: HTTPFields = {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return headers
    }()
}
