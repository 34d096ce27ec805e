import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Ends a connection whose response said `Connection: close`, and never serves a request sent after such a response.
///
/// Hummingbird closes a connection after a response only when the *request* asked for it; otherwise it reads and
/// discards the rest of the request body and serves the next request. Our answers that say `Connection: close` are
/// those given without reading the body (a body announced over the limit, a forward-auth request with a body): an
/// upload that went on was read and thrown away for as long as the client kept sending (the idle timeout counts only
/// silence), and a request pipelined behind it was served although the client, told the connection ends, would never
/// read that answer (red team: a pipelined `/v1/verify` used up its token's replay claim unseen).
///
/// So a request's parts reach the application only once every earlier response has ended: a pipelined request waits
/// here (with reads paused) until the response before it is written, and is dropped if that response said close.
/// From the head of such a response on, what the client sends is read and dropped until it closes or
/// ``lingerSeconds`` pass, and then the connection is closed. Closing at once, with the upload unread, makes the
/// kernel answer the client's next segment with a reset, and a client that writes its whole body before reading lost
/// the 413 (red team: Python's `http.client` with a 5 MB body, 19 of 20 times).
final class ClosingAfterResponse: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// How long a connection whose response said close is still read, to let the client finish sending and read the
    /// answer, before it is closed.
    static let lingerSeconds: Int64 = 5

    private enum Held {
        case part(NIOAny)
        case event(Any)
        /// A parse error of a request behind one not answered yet: raised in its turn, not before that answer.
        case error(any Error)
    }

    private var closing = false
    private var scheduledClose: Scheduled<Void>?
    /// Requests whose `.end` has been passed on, and responses whose `.end` has been written.
    private var requestsEnded = 0
    private var responsesEnded = 0
    /// Parts (and input events) of requests that wait for an earlier response.
    private var held = CircularBuffer<Held>()
    private var readPending = false
    /// The request being answered said `Connection: close`.
    private var requestAskedClose = false
    /// The response that said close has been written whole: nothing is written after it.
    private var closeAnswered = false

    /// A request part arriving now belongs to a request whose predecessor has not been answered yet.
    private var mustHold: Bool { !held.isEmpty || requestsEnded > responsesEnded }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        guard !mustHold else {
            held.append(.part(data))
            return
        }
        pass(data, context: context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The client's end of input comes after the requests it pipelined: it waits behind them.
        if !closing, !held.isEmpty || requestsEnded > responsesEnded, event is ChannelEvent {
            held.append(.event(event))
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // From a close answer on, what the client sends is dropped, its framing errors too: a parse error there was
        // answered with a second response, a 400, after the one that said close (red team round 14). The connection
        // closes all the same (at the end of the linger, or on a read error, which NIO closes it for).
        if closing { return }
        if mustHold {
            held.append(.error(error))
            return
        }
        context.fireErrorCaught(error)
    }

    func read(context: ChannelHandlerContext) {
        // Nothing more is read while parts wait (so they are at most one read's worth). After a close answer reading
        // goes on: the upload is drained and dropped.
        if !closing && !held.isEmpty {
            readPending = true
            return
        }
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        scheduledClose?.cancel()
        scheduledClose = nil
        held.removeAll()
        context.fireChannelInactive()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // After the answer that said close nothing more is answered: a framing error met before that answer (in the
        // same read as its request's head) was answered again afterwards, with a 400 (red team round 15).
        if closeAnswered {
            promise?.succeed(())
            return
        }
        var data = data
        var responseEnded = false
        switch unwrapOutboundIn(data) {
        case .head(var head):
            // A 1xx answer (100 Continue, from JSONRequestBody) is not the response.
            guard head.status.kind != .informational else { break }
            // An answer given before its request has arrived whole (a route that reads no body, for a body announced
            // and not sent or still coming) ends the connection: reading on to find the next request would be reading
            // and dropping that body for as long as the client sends it (red team: `GET /healthz` with a length of
            // 70,000 was answered and then held until the idle timeout). Such an answer, and the answer to a request
            // that asked for the connection to end, say so: Hummingbird closes without saying it (red team).
            let requestUnread = requestsEnded <= responsesEnded
            let saysClose = head.headerFields[values: .connection].contains { Self.saysClose($0) }
            if !saysClose && (requestUnread || requestAskedClose) {
                head.headerFields[.connection] = "close"
                data = wrapOutboundOut(.head(head))
            }
            if saysClose || requestUnread || requestAskedClose {
                closing = true
                // Requests that waited are dropped; the client's end of input, if it came, still ends the connection.
                let events = held.compactMap { held -> Any? in
                    if case .event(let event) = held { return event }
                    return nil
                }
                held.removeAll()
                if !events.isEmpty {
                    let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
                    context.eventLoop.execute { for event in events { bound.value.fireUserInboundEventTriggered(event) } }
                }
                // A read held back for the parts that waited is made now: the upload is drained from here on.
                if readPending {
                    readPending = false
                    context.read()
                }
            }
        case .body:
            break
        case .end:
            responsesEnded += 1
            responseEnded = true
            if closing { closeAnswered = true }
            if closing && scheduledClose == nil {
                let channel = context.channel
                scheduledClose = context.eventLoop.scheduleTask(in: .seconds(Self.lingerSeconds)) { channel.close(promise: nil) }
            }
        }
        context.write(data, promise: promise)
        if responseEnded && !closing && !held.isEmpty {
            // On the next turn of the loop, not inside the application's write: what waited then arrives as a read.
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            context.eventLoop.execute { bound.value.handler.release(context: bound.value.context) }
        }
    }

    private func pass(_ data: NIOAny, context: ChannelHandlerContext) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            // HTTP1VersionRules has spelled every request after which the connection ends this one way.
            requestAskedClose = request.headerFields[.connection] == "close"
        case .body: break
        case .end: requestsEnded += 1
        }
        context.fireChannelRead(data)
    }

    /// Passes on what waited, up to the end of the next request that needs an answer first.
    private func release(context: ChannelHandlerContext) {
        guard !closing else { return }
        var passed = false
        while !held.isEmpty, requestsEnded <= responsesEnded {
            switch held.removeFirst() {
            case .part(let data):
                pass(data, context: context)
                passed = true
            case .event(let event):
                context.fireUserInboundEventTriggered(event)
            case .error(let error):
                context.fireErrorCaught(error)
            }
        }
        if passed { context.fireChannelReadComplete() }
        if held.isEmpty && readPending {
            readPending = false
            context.read()
        }
    }

    /// True for a `Connection` value that lists the `close` option (RFC 9110 §7.6.1: comma-separated, case-insensitive).
    static func saysClose(_ value: String) -> Bool {
        value.utf8.split(separator: UInt8(ascii: ",")).contains { option in
            let trimmed = option.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
            let end = trimmed.lastIndex { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
            guard let end else { return false }
            let word = trimmed[...end]
            return word.count == 5 && zip(word, "close".utf8).allSatisfy { ($0 | 0x20) == $1 }
        }
    }
}
