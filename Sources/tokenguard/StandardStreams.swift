import TokenGuardBatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's standard streams, whatever state the caller left them in.
enum StandardStreams {
    /// Which of descriptors 0–2 were closed when the process started.
    nonisolated(unsafe) private(set) static var closedAtStart: Set<Int32> = []  // written once, before any thread

    /// Puts /dev/null on any of descriptors 0–2 that the caller closed. Left closed, the next file opened would take
    /// that number, and verdicts or log lines would be written into it (a key archive, a revocation store).
    static func reserve() {
        for fd in Int32(0)...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
            closedAtStart.insert(fd)
            // The lowest free descriptor: `fd` itself, since the lower ones are open by now.
            let opened = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY)
            if opened != fd && opened >= 0 { close(opened) }
        }
    }
}

/// Messages, logs and progress: written when standard error can take them, dropped when it cannot (closed, or a
/// log reader gone), never a crash.
enum Stderr {
    static func write(_ text: String) { FileDescriptorWriter.standardError.writeIfPossible(text) }
}

enum Stdout {
    /// Unbuffered, for lines that must appear at once and may be lost (the demo's instructions).
    static func write(_ text: String) { FileDescriptorWriter.standardOutput.writeIfPossible(text) }

    /// A command's answer and a newline, written whole; when it cannot be (standard output closed, full, or a pipe
    /// whose reader has gone) the command says why and exits 2, as `batch` does: an answer is never lost silently.
    static func answer(_ text: String) throws {
        try requireOpen()
        do {
            try FileDescriptorWriter.standardOutput.write(Array((text + "\n").utf8))
        } catch {
            Stderr.write("tokenguard: \(error)\n")
            throw ExitCodes.usage
        }
    }

    /// Exit 2 when the process was started with standard output closed (it was given /dev/null, see
    /// ``StandardStreams/reserve()``): an answer written there would be lost without a word. A command that changes
    /// something (`revoke`) calls this before changing it.
    static func requireOpen() throws {
        guard StandardStreams.closedAtStart.contains(STDOUT_FILENO) else { return }
        Stderr.write("tokenguard: standard output is closed: the answer would have nowhere to go\n")
        throw ExitCodes.usage
    }
}
