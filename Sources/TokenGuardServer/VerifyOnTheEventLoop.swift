import Dispatch
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTPTypes
import TokenGuardCore
import TokenGuardService

/// Answers `POST /v1/verify` and forward-auth checks on the connection's event loop, in the channel pipeline, when
/// the answer needs no waiting; everything else goes on to the router unchanged.
///
/// Why: on a server with one event loop (``EventLoopConnections``), a cached verification costs a few microseconds,
/// and the async request path around it (the channel's hand-over of each part to the connection's task, the task's
/// resumptions, the async writer, the router) cost several times that: a profile of the release server had 65 % of
/// `/healthz`'s time in the task executor. Here a request is answered where it is read.
///
/// A request is answered here only when all of it came in one read (head, body and end, with no trailers), the
/// connection is writable, its target is `/v1/verify` byte for byte (a `POST` with a `Content-Length` body within the
/// limit) or lies under `/v1/authz/` in unreserved characters (any method, no body), it has no `Connection`, `Expect`,
/// `Upgrade` or `Transfer-Encoding` field, it carries an accepted caller key when keys are configured, and the
/// verdict needs no waiting (no `explain`, no key to fetch, no claim to ask Redis). It is answered by the same code
/// as the router's (``VerifyRoutes/answer(_:result:explanation:)``, ``ForwardAuthCheck``), with the header fields
/// Hummingbird adds (`Content-Length`, `Date`, `Server`, in that order). Otherwise its parts are passed on as they
/// came, and the router reads it as it would have.
///
/// Order is kept by ``ClosingAfterResponse``, which sits before this handler: a request reaches it only once every
/// earlier response has been written.
final class VerifyOnTheEventLoop: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    /// What the answers are made with: made once when the server starts.
    struct Answering: Sendable {
        let routes: VerifyRoutes
        let forwardAuth: ForwardAuthCheck
        let callerKeys: CallerKeys?
        let serverName: String
    }

    private enum Endpoint {
        case verify
        case forwardAuth(providerSegment: String)
    }

    private enum State {
        case idle
        /// A request that may be answered here, held until its end arrives in the same read.
        case holding(HTTPTypes.HTTPRequest, Endpoint, ByteBuffer?)
        /// A request going to the router: its parts are passed on.
        case passing
    }

    private let answering: Answering
    private var state = State.idle
    private var date: (second: Int, text: String) = (-1, "")

    init(_ answering: Answering) { self.answering = answering }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch (state, part) {
        case (.idle, .head(let head)):
            guard let endpoint = endpoint(of: head) else {
                state = .passing
                context.fireChannelRead(data)
                return
            }
            state = .holding(head, endpoint, nil)
        case (.holding(let head, let endpoint, var body), .body(let chunk)):
            state = .idle
            if body == nil { body = chunk } else { body?.writeImmutableBuffer(chunk) }
            state = .holding(head, endpoint, body)
        case (.holding(let head, let endpoint, let body), .end(let trailers)):
            state = .idle
            if trailers == nil, answer(head, endpoint, body, context: context) { return }
            passOn(head, body, context: context)
            context.fireChannelRead(data)
        case (.passing, .end):
            state = .idle
            context.fireChannelRead(data)
        default:
            passHeld(context: context)
            context.fireChannelRead(data)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // A request not whole in this read goes to the router, which reads the rest under its timeouts.
        passHeld(context: context)
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        passHeld(context: context)
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        passHeld(context: context)
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        passHeld(context: context)
        context.fireChannelInactive()
    }

    private func passHeld(context: ChannelHandlerContext) {
        guard case .holding(let head, _, let body) = state else { return }
        state = .passing
        passOn(head, body, context: context)
    }

    private func passOn(_ head: HTTPTypes.HTTPRequest, _ body: ByteBuffer?, context: ChannelHandlerContext) {
        context.fireChannelRead(wrapInboundOut(.head(head)))
        if let body { context.fireChannelRead(wrapInboundOut(.body(body))) }
    }

    /// The endpoint a request may be answered for here, from its head alone; nil for one the router reads.
    private func endpoint(of head: HTTPTypes.HTTPRequest) -> Endpoint? {
        guard let target = head.path else { return nil }
        let fields = head.headerFields
        if fields.contains(.connection) || fields.contains(.expect) || fields.contains(.upgrade) || fields.contains(.transferEncoding) {
            return nil
        }
        let lengths = fields[values: .contentLength]
        let endpoint: Endpoint
        if head.method == .post, target.utf8.elementsEqual("/v1/verify".utf8) {
            guard lengths.count == 1, let length = Int(lengths[0]), length <= answering.routes.settings.maximumVerifyBodyBytes else { return nil }
            endpoint = .verify
        } else if let segment = Self.forwardAuthSegment(target) {
            guard lengths.isEmpty || (lengths.count == 1 && lengths[0] == "0") else { return nil }
            endpoint = .forwardAuth(providerSegment: segment)
        } else {
            return nil
        }
        if let keys = answering.callerKeys, !CallerKeyMiddleware<TokenGuardRequestContext>.allows(keys, fields) { return nil }
        return endpoint
    }

    /// The provider segment of a target under `/v1/authz/` written only in unreserved characters and `/` (no query,
    /// no percent-encoding: a target the router would read differently from its bytes goes to the router).
    static func forwardAuthSegment(_ target: String) -> String? {
        let prefix = "\(ForwardAuthCheck.prefix)/".utf8
        guard target.utf8.starts(with: prefix) else { return nil }
        for byte in target.utf8.dropFirst(prefix.count) {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "/"):
                continue
            default: return nil
            }
        }
        return ForwardAuthCheck.providerSegment(target).map(String.init)
    }

    /// Writes the answer and returns true when it needs no waiting; false, with nothing done, otherwise.
    private func answer(_ head: HTTPTypes.HTTPRequest, _ endpoint: Endpoint, _ body: ByteBuffer?, context: ChannelHandlerContext) -> Bool {
        // A client not reading its answers is left to the router's writer, which waits for it.
        guard context.channel.isWritable else { return false }
        switch endpoint {
        case .verify:
            guard let body, let item = try? VerifyRequest.decodeBody(body.readableBytesView), !item.explain else { return false }
            let routes = answering.routes
            let started = DispatchTime.now()
            guard let result = routes.registry.verifyWithoutWaiting(provider: item.provider, token: item.token, nonce: item.nonce, claimReplay: true)
            else { return false }
            routes.metrics.record(provider: item.provider, result: result, startedAt: started)
            switch routes.answer(item, result: result, explanation: nil) {
            case .verdict(let verdict): write(verdict, bodyless: false, context: context)
            case .refusal(let error): write(error.answer, bodyless: false, context: context)
            }
            routes.metrics.countAnsweredInPipeline(forwardAuth: false)
        case .forwardAuth(let segment):
            let fields = head.headerFields.map { (name: $0.name.canonicalName, value: $0.value) }
            guard case .answer(let answer) = answering.forwardAuth.answerWithoutWaiting(providerSegment: segment, headers: fields) else {
                return false
            }
            write(answer, bodyless: head.method == .head, context: context)
            answering.routes.metrics.countAnsweredInPipeline(forwardAuth: true)
        }
        return true
    }

    private func write(_ answer: JSONAnswer, bodyless: Bool, context: ChannelHandlerContext) {
        var fields = answer.headers
        // Appended, not set: the answers made here carry no Date or Server field, and a Content-Length only when
        // `contains` finds it (setting one searches the fields and removes what it finds first).
        if !fields.contains(.contentLength) { fields.append(HTTPField(name: .contentLength, value: String(answer.body.count))) }
        fields.append(HTTPField(name: .date, value: httpDate()))
        fields.append(HTTPField(name: .server, value: answering.serverName))
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        if !bodyless && !answer.body.isEmpty {
            context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: answer.body))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// The `Date` field (RFC 9110 IMF-fixdate), made once a second.
    private func httpDate() -> String {
        var now = time(nil)
        guard Int(now) != date.second else { return date.text }
        date = (Int(now), HTTPDate.format(&now))
        return date.text
    }
}

enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `Sat, 28 Nov 2026 13:45:01 GMT` for a `time_t`.
    static func format(_ time: inout time_t) -> String {
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return "Thu, 01 Jan 1970 00:00:00 GMT" }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        // gmtime_r's fields are in range; clamped all the same, so no reading of them can trap.
        let day = days[Int(min(max(parts.tm_wday, 0), 6))]
        let month = months[Int(min(max(parts.tm_mon, 0), 11))]
        return
            "\(day), \(two(parts.tm_mday)) \(month) \(Int(parts.tm_year) + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
