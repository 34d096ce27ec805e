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

    /// Starts watching `output`; `changed` is called on the watch's thread with `true` when the reader goes and
    /// `false` when a named pipe gets a reader again. Nil when `output` is neither a pipe nor a socket, or no wake-up
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
            var watched = [
                pollfd(fd: output, events: 0, revents: 0), pollfd(fd: watch.wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            // `POLLERR` and `POLLHUP` stay set while the reader is away, so once it has gone the output is looked at
            // every 100 ms instead of waited on: a FIFO opened by a new reader clears them (red team 25).
            var gone = false
            while true {
                if poll(&watched, 2, gone ? 100 : -1) < 0 {
                    if errno == EINTR { continue }
                    return
                }
                if watched[1].revents != 0 { return }
                let outcome = Int32(watched[0].revents)
                if outcome & POLLNVAL != 0 { return }
                let absent = outcome & (POLLERR | POLLHUP) != 0
                if absent != gone {
                    gone = absent
                    changed(gone)
                }
            }
        }
        return watch
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
