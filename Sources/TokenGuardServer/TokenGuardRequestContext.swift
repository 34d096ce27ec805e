import Hummingbird
import NIOCore

/// tokenguard's request context. The upload limit here is the largest any route accepts; each route also
/// collects its body up to its own, smaller limit.
package struct TokenGuardRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage
    package var maxUploadSize: Int { 64 * 1024 * 1024 }
    /// True when the TCP peer is on this host (127.0.0.0/8 or ::1): revocation writes without admin keys.
    package let peerIsLoopback: Bool
    /// The peer as text, for the audit log of revocation writes.
    package let peer: String
    /// The connection: closed when a request body does not arrive within the request timeout.
    package let channel: any Channel

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
        let address = source.channel.remoteAddress
        peer = address?.ipAddress ?? "unknown"
        // The address as the kernel gave it (inet_ntop's text): 127.0.0.0/8, or ::1 exactly.
        switch address {
        case .v4?: peerIsLoopback = peer.utf8.starts(with: "127.".utf8)
        // ::1, or IPv4 loopback as a dual-stack listener sees it.
        case .v6?: peerIsLoopback = peer == "::1" || peer.utf8.starts(with: "::ffff:127.".utf8)
        default: peerIsLoopback = false
        }
    }
}
