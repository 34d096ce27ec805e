import Hummingbird
import NIOCore

/// tokenguard's request context. The upload limit here is the largest any route accepts; each route also
/// collects its body up to its own, smaller limit.
package struct TokenGuardRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage
    package var maxUploadSize: Int { 64 * 1024 * 1024 }
    /// The connection: closed when a request body does not arrive within the request timeout.
    package let channel: any Channel

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }

    /// The peer as text, for the audit log of revocation writes. Made when asked: only a revocation write reads it, and
    /// formatting the address for every request cost an allocation each.
    package var peer: String { channel.remoteAddress?.ipAddress ?? "unknown" }

    /// True when the TCP peer is on this host (127.0.0.0/8 or ::1): revocation writes without admin keys.
    package var peerIsLoopback: Bool {
        // The address as the kernel gave it (inet_ntop's text): 127.0.0.0/8, or ::1 exactly.
        let address = channel.remoteAddress
        let peer = address?.ipAddress ?? "unknown"
        switch address {
        case .v4?: return peer.utf8.starts(with: "127.".utf8)
        // ::1, or IPv4 loopback as a dual-stack listener sees it.
        case .v6?: return peer == "::1" || peer.utf8.starts(with: "::ffff:127.".utf8)
        default: return false
        }
    }
}
