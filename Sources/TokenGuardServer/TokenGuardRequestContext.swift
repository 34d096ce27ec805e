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

    /// The TCP peer: its address as text, for the audit log of revocation writes, and whether it is on this host
    /// (127.0.0.0/8 or ::1), which lets a revocation write in without admin keys. Made when asked (only a revocation
    /// write asks; formatting the address for every request cost an allocation each), from one read of the address, so
    /// that the two describe the same peer: the channel forgets the address when the connection closes, and two reads
    /// around a reset once logged a loopback write as from "unknown" (red team).
    package var peer: (address: String, isLoopback: Bool) {
        let remote = channel.remoteAddress
        // The address as the kernel gave it (inet_ntop's text): 127.0.0.0/8, or ::1 exactly.
        let address = remote?.ipAddress ?? "unknown"
        switch remote {
        case .v4?: return (address, address.utf8.starts(with: "127.".utf8))
        // ::1, or IPv4 loopback as a dual-stack listener sees it.
        case .v6?: return (address, address == "::1" || address.utf8.starts(with: "::ffff:127.".utf8))
        default: return (address, false)
        }
    }
}
