import Hummingbird
import NIOCore
import NIOHTTPTypes
import TokenGuardCore

/// Request bodies read as one JSON object, bounded in size and in time. Every route that reads a body reads it here:
/// a body trickled a byte at a time would otherwise hold its connection, and a graceful shutdown waiting for it, for
/// ever.
enum JSONRequestBody {
    /// The body as a JSON object, at most `limit` bytes. A client that has not sent all of it within `closingAfter`
    /// seconds loses the connection.
    nonisolated(nonsending) static func read(_ request: Request, _ channel: any Channel, limit: Int, closingAfter seconds: Int) async throws
        -> JSONObject
    {
        let body = try await bytes(request, channel, limit: limit, closingAfter: seconds)
        do {
            return try VerifyRequest.parseBody(body.readableBytesView)
        } catch {
            throw APIError.invalidRequest(error.message)
        }
    }

    /// The body's bytes, at most `limit` of them, bounded in time as ``read(_:_:limit:closingAfter:)`` is.
    nonisolated(nonsending) static func bytes(_ request: Request, _ channel: any Channel, limit: Int, closingAfter seconds: Int) async throws
        -> ByteBuffer
    {
        // A body announced as too large is refused at once, before any of it is read: waiting for bytes that may never
        // come would hold the connection until the idle timeout and answer nothing.
        let announced = request.headers.announcedContentLength
        if let length = announced, length > limit {
            // A length past Int.max was read as Int.max: no number is given for it.
            let size = length == Int.max ? "request body" : "request body of \(length) bytes"
            throw APIError(status: .contentTooLarge, code: .invalidRequest, message: "\(size) is larger than \(limit) bytes")
        }
        // NIO's parser takes any coding list ending in `chunked` (`gzip, chunked`) and hands on the bytes under it as
        // the body: a body in a coding tokenguard does not decode is refused, not read as if it were plain, and the
        // connection closes (the body is left unread).
        if request.headers.contains(.transferEncoding), !isChunkedAlone(request.headers[values: .transferEncoding]) {
            throw APIError(
                status: .badRequest, code: .invalidRequest, message: "unsupported transfer coding: only chunked is accepted",
                closesConnection: true)
        }
        // A client that asked to hear first whether its body is wanted (curl does for bodies over 1 MiB) would wait a
        // second for an answer before sending it anyway. It is wanted: say so. Before this point a body too large has
        // been refused instead, so that client never sends it.
        if let expectation = request.headers.onlyValue(.expect), expectation.utf8.count == 12, expectation.lowercased() == "100-continue" {
            channel.writeAndFlush(HTTPResponsePart.head(HTTPResponse(status: .continue)), promise: nil)
        }
        do {
            return try await RequestTimeout.closingConnection(channel, after: seconds) {
                try await collect(request.body, upTo: limit, announced: announced)
            }
        } catch is NIOTooManyBytesError {
            throw APIError(status: .contentTooLarge, code: .invalidRequest, message: "request body larger than \(limit) bytes")
        } catch {
            // The parser's error (a bad chunk size, an unsupported transfer coding) or the client's end of input before
            // the announced length: the stream cannot be read on, so the connection closes after the answer.
            throw APIError(
                status: .badRequest, code: .invalidRequest, message: "request body could not be read: it ended early or was badly framed",
                closesConnection: true)
        }
    }

    /// Whether the `Transfer-Encoding` fields, together, list exactly one coding, `chunked` in any case (RFC 9112 §6.1:
    /// a list, blanks around its commas, empty elements ignored).
    static func isChunkedAlone(_ values: [String]) -> Bool {
        var codings = 0
        for value in values {
            for element in value.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
                let coding = element.drop(while: isBlank).reversed().drop(while: isBlank).reversed()
                if coding.isEmpty { continue }
                codings += 1
                guard ASCII.lowercased(String(decoding: coding, as: UTF8.self), hasBytesOf: "chunked") else { return false }
            }
        }
        return codings == 1
    }

    /// The body's parts in one buffer (the first part itself when it is the only one), at most `limit` bytes: what
    /// NIO's `collect(upTo:)` does, without its two wrapping layers of async calls (each call and return switches tasks
    /// through the runtime's executor-preference check). With a Content-Length the parser ends the body after that many
    /// bytes, so the body is whole once they are here; its end marker is then read by the server's own request loop,
    /// which reads it through fewer layers than the body's iterator.
    nonisolated(nonsending) static func collect(_ body: RequestBody, upTo limit: Int, announced: Int?) async throws -> ByteBuffer {
        var parts = body.makeAsyncIterator()
        var collected = ByteBuffer()
        while announced.map({ collected.readableBytes < $0 }) ?? true, let part = try await parts.next() {
            guard part.readableBytes <= limit - collected.readableBytes else { throw NIOTooManyBytesError(maxBytes: limit) }
            if collected.readableBytes == 0 { collected = part } else { collected.writeImmutableBuffer(part) }
        }
        return collected
    }
}
