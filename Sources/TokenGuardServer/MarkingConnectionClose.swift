import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1

/// Marks each request after which its connection ends with the one spelling Hummingbird's request loop looks for,
/// `Connection: close` exactly, before the request is converted to HTTP types (which drop the HTTP version).
///
/// Why: the loop closes a connection after a response only when the request says `close` in those five lower-case
/// letters. An HTTP/1.0 request without `keep-alive` (whose connection ends with the response, RFC 9112 §9.3) or
/// one saying `Connection: Close` was answered and then held open until the idle timeout, and a client reading to
/// the end of the connection waited that long (red team: 30 s).
final class MarkingConnectionClose: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data), !head.isKeepAlive else {
            context.fireChannelRead(data)
            return
        }
        head.headers.replaceOrAdd(name: "Connection", value: "close")
        context.fireChannelRead(wrapInboundOut(.head(head)))
    }

    /// Puts the handler where it sees HTTP/1 request heads: just before Hummingbird's conversion to HTTP types.
    static func install(in pipeline: ChannelPipeline.SynchronousOperations) throws {
        let conversion = try pipeline.handler(type: HTTP1ToHTTPServerCodec.self)
        try pipeline.addHandler(MarkingConnectionClose(), position: .before(conversion))
    }
}
