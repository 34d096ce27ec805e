import Foundation

/// Where `taskset` (util-linux) is, for running a process on chosen CPUs: pinned servers in tests, and the bench's
/// server and generator on cores of their own.
package enum CPUPinning {
    package static var taskset: String? {
        ["/usr/bin/taskset", "/bin/taskset"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}
