import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1

/// Applies, to each request head, the HTTP/1 rules that depend on what Hummingbird's conversion to HTTP types drops
/// (the HTTP version) or reads too narrowly (the `Connection` field).
///
/// - A request after which its connection ends is marked with the one spelling Hummingbird's request loop looks for,
///   `Connection: close` exactly: HTTP/1.0 without `keep-alive` (RFC 9112 §9.3), and any request whose `Connection`
///   fields list `close` in any case, beside `keep-alive` or not (`close` wins). Without it such a request was answered
///   and then held open until the idle timeout, and a client reading to the end of the connection waited that long
///   (red team: 30 s; NIO's keep-alive flag for HTTP/1.0 is set by any `keep-alive`, even next to `close`).
/// - An HTTP/1.0 request's `Expect` field is removed: a server must ignore a 100-continue expectation there
///   (RFC 9110 §10.1.1), and ``JSONRequestBody`` would otherwise answer it.
final class HTTP1VersionRules: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// The request being read asks to switch protocols (a `CONNECT`, or any `Upgrade` field).
    private var requestSwitches = false
    /// Such a request has been read whole: nothing more is read from the socket.
    private var parserStopped = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data) else {
            // NIO's parser parses nothing after a request that switches protocols (once its body, if any, is read) and
            // keeps every byte that follows in its buffer, without bound (red team round 15: 1 GB in 4 s on one
            // connection). Which requests it stops at depends on more than `Connection` (`Proxy-Connection: upgrade`
            // too, red team round 16): every request that asks to switch is taken as one, and read no further than its
            // end. Its answer says close, so nothing after it would be served anyway.
            if requestSwitches, case .end = unwrapInboundIn(data) { parserStopped = true }
            context.fireChannelRead(data)
            return
        }
        let isHTTP10 = head.version.major == 1 && head.version.minor == 0
        // One pass over the fields for what the rules below need.
        var (asksClose, hasUpgrade, hasTransferEncoding) = (false, false, false)
        for field in head.headers {
            if Self.isConnection(field.name) {
                asksClose = asksClose || ClosingAfterResponse.saysClose(field.value)
            } else if Self.name(field.name, is: "upgrade") {
                hasUpgrade = true
            } else if Self.name(field.name, is: "transfer-encoding") {
                hasTransferEncoding = true
            }
        }
        requestSwitches = head.method == .CONNECT || hasUpgrade
        // A request asking to upgrade (or a CONNECT) is answered as HTTP/1.1 and ends its connection: NIO's parser reads
        // nothing after one, so a request pipelined behind it was never answered, and the connection sat open until
        // the idle timeout (red team rounds 14 and 15). An HTTP/1.0 request with a Transfer-Encoding has faulty framing
        // and ends its connection after the answer (RFC 9112 §6.1; red team round 15).
        let closes = !head.isKeepAlive || asksClose || hasUpgrade || head.method == .CONNECT || (isHTTP10 && hasTransferEncoding)
        guard closes || (isHTTP10 && head.headers.contains(name: "expect")) else {
            context.fireChannelRead(data)
            return
        }
        if closes { head.headers.replaceOrAdd(name: "Connection", value: "close") }
        if isHTTP10 { head.headers.remove(name: "Expect") }
        context.fireChannelRead(wrapInboundOut(.head(head)))
    }

    func read(context: ChannelHandlerContext) {
        // After a request that switches protocols, the socket is not read: what follows waits in the kernel's socket
        // buffers, bounded, rather than in the parser's; the answer says close, and the connection ends after
        // ClosingAfterResponse's linger at the latest.
        guard !parserStopped else { return }
        context.read()
    }

    /// Whether a field's name is `Connection`, in any case: read in place, where `headers["connection"]` would build
    /// an array of values on every request.
    static func isConnection(_ name: String) -> Bool { Self.name(name, is: "connection") }

    /// Whether a field's name is `lowercased` (lower-case letters and '-') in any case, compared in place.
    static func name(_ name: String, is lowercased: StaticString) -> Bool {
        // Only 'C' and 'c' turn into 'c' with the 0x20 bit set (likewise for each letter), so this is an exact test for
        // letters; any other byte must be itself.
        let expected = UnsafeBufferPointer(start: lowercased.utf8Start, count: lowercased.utf8CodeUnitCount)
        return name.utf8.count == expected.count
            && name.utf8.elementsEqual(expected) { byte, wanted in
                wanted >= UInt8(ascii: "a") && wanted <= UInt8(ascii: "z") ? (byte | 0x20) == wanted : byte == wanted
            }
    }

    /// Puts the handler where it sees HTTP/1 request heads: just before Hummingbird's conversion to HTTP types.
    static func install(in pipeline: ChannelPipeline.SynchronousOperations) throws {
        let conversion = try pipeline.handler(type: HTTP1ToHTTPServerCodec.self)
        try pipeline.addHandler(HTTP1VersionRules(), position: .before(conversion))
    }
}
