#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes whole buffers to a file descriptor and reports a failure as an error. Foundation's `FileHandle.write`
/// traps when the descriptor is closed or the pipe is gone; an output that cannot be written is the caller's
/// error to report, never a crash.
package struct FileDescriptorWriter: Sendable {
    package let fileDescriptor: Int32

    package init(fileDescriptor: Int32) {
        self.fileDescriptor = fileDescriptor
    }

    package static let standardOutput = FileDescriptorWriter(fileDescriptor: STDOUT_FILENO)
    package static let standardError = FileDescriptorWriter(fileDescriptor: STDERR_FILENO)

    /// Writes every byte, across short writes and interruptions; waits when the descriptor is non-blocking and full.
    package func write(_ bytes: [UInt8]) throws(IOError) {
        let fd = fileDescriptor
        let failure: Int32? = bytes.withUnsafeBytes { raw -> Int32? in
            var offset = 0
            while offset < raw.count, let base = raw.baseAddress {
                let written = Glibc.write(fd, base + offset, raw.count - offset)
                if written > 0 {
                    offset += written
                    continue
                }
                let code = written < 0 ? errno : EIO
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK {
                    var wanted = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&wanted, 1, -1)
                    continue
                }
                return code
            }
            return nil
        }
        if let failure { throw IOError(message: "write failed: \(IOError.describe(failure))") }
    }

    /// For diagnostics (logs, progress, messages): a standard error that cannot be written is no reason to stop.
    package func writeIfPossible(_ text: String) {
        try? write(Array(text.utf8))
    }
}
