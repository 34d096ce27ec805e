import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

/// A server whose handlers run off the event loops (several loops: ``ServerEventLoops/httpServer(configuration:answering:)``)
/// gets each request body part in a buffer of its own, copied on the loop that read it, never in the loop's receive
/// buffers.
///
/// Why: NIO reads a connection into a small pool of buffers and reuses one as soon as nothing else holds it, and only
/// Swift's reference count says so. A handler on another thread that read a body part and dropped it is ordered before
/// that reuse by the count's atomics alone, inside the Swift runtime, where ThreadSanitizer does not look: under load
/// (parallel batch uploads) it reported the loop's next read into a buffer as a race with the handler's copy of an
/// earlier part (the same report as apple/swift-nio#303 and #2322). With parts copied here, a buffer the loop reuses
/// was only ever touched by the loop. A second reason: a pointer into a body kept past its buffer's life would read
/// freed memory, which AddressSanitizer reports, rather than silently read another request's bytes in a reused buffer.
///
/// The cost is one allocation and copy per body part (a verification's body is about a kilobyte), beside a request
/// that crosses threads twice. With one loop the handlers run on it (``EventLoopConnections``) and nothing is copied.
/// Both shapes apply ``HTTP1VersionRules`` to request heads.
struct BodiesOffThePool<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let pipeline = channel.pipeline.syncOperations
            try HTTP1VersionRules.install(in: pipeline)
            let connectionState = try pipeline.handler(type: HTTPConnectionStateHandler.self)
            try pipeline.addHandler(CopyingBodyParts(), position: .after(connectionState))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Passes each request part on, a body part as a copy in a new buffer.
final class CopyingBodyParts: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .body(let part) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        var copy = context.channel.allocator.buffer(capacity: part.readableBytes)
        copy.writeImmutableBuffer(part)
        context.fireChannelRead(wrapInboundOut(.body(copy)))
    }
}
