import Hummingbird
import NIOCore
import TokenGuardCore

/// Request bodies read as one JSON object, bounded in size and in time. Every route that reads a body reads it here:
/// a body trickled a byte at a time would otherwise hold its connection, and a graceful shutdown waiting for it, for
/// ever.
enum JSONRequestBody {
    /// The body as a JSON object, at most `limit` bytes. A client that has not sent all of it within `closingAfter`
    /// seconds loses the connection.
    static func read(_ request: Request, _ channel: any Channel, limit: Int, closingAfter seconds: Int) async throws -> JSONObject {
        let body = try await bytes(request, channel, limit: limit, closingAfter: seconds)
        do {
            return try VerifyRequest.parseBody(body.readableBytesView)
        } catch {
            throw APIError.invalidRequest(error.message)
        }
    }

    /// The body's bytes, at most `limit` of them, bounded in time as ``read(_:_:limit:closingAfter:)`` is.
    static func bytes(_ request: Request, _ channel: any Channel, limit: Int, closingAfter seconds: Int) async throws -> ByteBuffer {
        // A body announced as too large is refused at once, before any of it is read: waiting for bytes that may never
        // come would hold the connection until the idle timeout and answer nothing.
        if let announced = request.headers[.contentLength], let length = Int(announced), length > limit {
            throw APIError(status: .contentTooLarge, code: .invalidRequest, message: "request body of \(length) bytes is larger than \(limit) bytes")
        }
        do {
            return try await RequestTimeout.closingConnection(channel, after: seconds) { try await request.body.collect(upTo: limit) }
        } catch {
            throw APIError(status: .contentTooLarge, code: .invalidRequest, message: "request body larger than \(limit) bytes")
        }
    }
}
