import Foundation
import TokenGuardCore

extension WallClock {
    /// The system's real-time clock: what the composition root hands every part of a running service.
    package static let system = WallClock { Date().timeIntervalSince1970 }
}
