import Dispatch
import Glibc

/// Tells a run that its output's reader has gone, while nothing is being written: a pipe's write end reports
/// `POLLERR` once its last reader closes, a socket `POLLHUP` once its peer has closed. Without this, a stream filter
/// whose reader left after the last answer (`tail -F log | tokenguard batch - | head -1`) lived on until the next input
/// line gave it something to write (red team 22).
///
/// Only a pipe or a socket is watched: a file or a terminal has no reader to lose. One thread of its own blocks in
/// `poll`, never a cooperative one; ``stop()`` wakes it through a pipe of its own and waits for it to end, so neither
/// descriptor is closed while it is polled.
final class VanishedReaderWatch: Sendable {
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let ended = DispatchSemaphore(value: 0)

    private init(wakeRead: Int32, wakeWrite: Int32) {
        self.wakeRead = wakeRead
        self.wakeWrite = wakeWrite
    }

    /// Starts watching `output`; `changed` is called on the watch's thread with `true` when the reader goes and at
    /// every look (each 100 ms) while it stays away, and with `false` when a named pipe gets a reader again. Nil when `output` is neither a pipe nor a socket, or no wake-up
    /// pipe could be made (the run then learns of a lost reader from its next write).
    static func start(output: Int32, changed: @escaping @Sendable (_ gone: Bool) -> Void) -> VanishedReaderWatch? {
        var status = stat()
        guard fstat(output, &status) == 0 else { return nil }
        let type = status.st_mode & S_IFMT
        guard type == S_IFIFO || type == S_IFSOCK else { return nil }
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let watch = VanishedReaderWatch(wakeRead: ends[0], wakeWrite: ends[1])
        DispatchQueue(label: "tokenguard.batch.output-watch").async {
            defer { watch.ended.signal() }
            // `POLLERR` and `POLLHUP` stay set while the reader is away, so a poll that includes the output would return
            // at once: once the reader has gone, only the wake-up pipe is waited on, 100 ms at a time, and the output
            // looked at between waits (a FIFO opened by a new reader clears them; red teams 25, 26).
            var gone = false
            while true {
                var watched = [pollfd(fd: watch.wakeRead, events: Int16(POLLIN), revents: 0), pollfd(fd: output, events: 0, revents: 0)]
                if poll(&watched, gone ? 1 : 2, gone ? 100 : -1) < 0 {
                    if errno == EINTR { continue }
                    return
                }
                if watched[0].revents != 0 { return }
                guard let absent = readerAbsent(output) else { return }
                // Told at every look while the reader is away, not only when that changes: a reader that came, took an
                // answer and left between two looks has cleared the sink's departure by that write (red team 27).
                if absent || absent != gone { changed(absent) }
                gone = absent
            }
        }
        return watch
    }

    /// Whether `output`'s reader is gone (`POLLERR` or `POLLHUP`) at this moment; nil when it cannot be told (the
    /// descriptor is not open).
    static func readerAbsent(_ output: Int32) -> Bool? {
        var state = pollfd(fd: output, events: 0, revents: 0)
        while poll(&state, 1, 0) < 0 {
            guard errno == EINTR else { return nil }
        }
        let outcome = Int32(state.revents)
        guard outcome & POLLNVAL == 0 else { return nil }
        return outcome & (POLLERR | POLLHUP) != 0
    }

    /// Ends the watch and waits for its thread to let go of both descriptors, then closes the wake-up pipe.
    func stop() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        ended.wait()
        close(wakeRead)
        close(wakeWrite)
    }
}
