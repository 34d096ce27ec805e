import Foundation
import TokenGuardCore

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP port free on 127.0.0.1 right now: bind to port 0, read the port the kernel chose, release it.
/// (The demo's embedded dev IdP and the tests' servers use it; there is a small window in which another process
/// could take the port.)
package enum LoopbackPort {
    package struct Unavailable: Error, CustomStringConvertible {
        package var description: String { "no free port on 127.0.0.1" }
    }

    package static func pick() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Unavailable() }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { throw Unavailable() }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
