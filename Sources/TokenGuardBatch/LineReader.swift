import TokenGuardCore
import TokenGuardService

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads newline-delimited records from a file descriptor with a bounded line length.
///
/// A line longer than the bound is reported as ``Line/tooLong(_:)`` and skipped to its end without being
/// buffered, so memory stays bounded whatever the input holds.
package struct LineReader: Sendable {
    package enum Line: Equatable, Sendable {
        case line([UInt8])
        /// A line over the limit: its length and its first bytes (up to ``headBytes``), so its `id` can be echoed.
        case tooLong(Int, head: [UInt8])

        /// Lines are equal by content; an over-long line by its length (its head is a diagnostic).
        package static func == (lhs: Line, rhs: Line) -> Bool {
            switch (lhs, rhs) {
            case (.line(let l), .line(let r)): l == r
            case (.tooLong(let l, _), .tooLong(let r, _)): l == r
            default: false
            }
        }
    }

    /// What ``next(waitingAtMost:)`` found.
    package enum Next: Equatable, Sendable {
        case line(Line)
        case endOfInput
        /// No whole line arrived within the wait; what was read is kept for the next call.
        case notYet
    }

    private let fd: Int32
    private let maximumLineBytes: Int
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var finished = false
    /// Bytes of an over-long line skipped so far, and its first bytes (kept when discarding starts). Stored, not
    /// local, so a line can be left unfinished by ``next(waitingAtMost:)`` and resumed by the next call.
    private var discarding = 0
    private var head: [UInt8] = []
    /// Whether the last byte discarded was `\r`: a CRLF line's length leaves out its `\r` however it was split.
    private var discardedEndsWithCR = false

    package init(fileDescriptor: Int32, maximumLineBytes: Int) {
        self.init(fileDescriptor: fileDescriptor, maximumLineBytes: maximumLineBytes, bufferBytes: 65_536)
    }

    /// A reader with a buffer of its own size: small buffers let tests and the fuzz target reach the
    /// compaction and discard paths with small inputs.
    package init(fileDescriptor: Int32, maximumLineBytes: Int, bufferBytes: Int) {
        self.fd = fileDescriptor
        self.maximumLineBytes = maximumLineBytes
        // Room for a line at the limit, its `\r`, and one more byte to tell whether the line goes on.
        self.buffer = [UInt8](repeating: 0, count: max(bufferBytes, maximumLineBytes + 2))
    }

    /// How much of an over-long line is kept (contract: an `id` within the first 4 KiB is echoed).
    package static let headBytes = 4096

    /// The next line without its terminator (`\n`, or `\r\n`), or nil at end of input; waits for input as long as
    /// it takes.
    package mutating func next() throws(IOError) -> Line? {
        while true {
            switch try next(waitingAtMost: nil) {
            case .line(let line): return line
            case .endOfInput: return nil
            case .notYet: continue
            }
        }
    }

    /// The next line, or ``Next/notYet`` when it has not come whole within `milliseconds` in all (nil: wait as long as
    /// it takes; 0: only what is ready now). A streaming producer's lines can then be answered without waiting for
    /// more, even one whose bytes trickle in.
    package mutating func next(waitingAtMost milliseconds: Int32?) throws(IOError) -> Next {
        let deadline = milliseconds.map { Self.monotonicMilliseconds() + Int64($0) }
        func wait() -> Int32 { deadline.map { Int32(clamping: max(0, $0 - Self.monotonicMilliseconds())) } ?? -1 }
        while true {
            if let newline = newlineIndex() {
                let lineEnd = newline
                defer { start = newline + 1 }
                if discarding > 0 {
                    let endsWithCR = lineEnd > start ? buffer[lineEnd - 1] == UInt8(ascii: "\r") : discardedEndsWithCR
                    return .line(takeOverlong(discarding + (lineEnd - start) - (endsWithCR ? 1 : 0)))
                }
                var line = Array(buffer[start..<lineEnd])
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                if line.count > maximumLineBytes { return .line(.tooLong(line.count, head: Array(line.prefix(Self.headBytes)))) }
                return .line(.line(line))
            }
            if finished {
                if start == end { return discarding > 0 ? .line(takeOverlong(discarding - (discardedEndsWithCR ? 1 : 0))) : .endOfInput }
                defer { start = end }
                if discarding > 0 {
                    let endsWithCR = buffer[end - 1] == UInt8(ascii: "\r")
                    return .line(takeOverlong(discarding + end - start - (endsWithCR ? 1 : 0)))
                }
                var line = Array(buffer[start..<end])
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                return .line(line.count > maximumLineBytes ? .tooLong(line.count, head: Array(line.prefix(Self.headBytes))) : .line(line))
            }
            // One byte over the limit may still be a line at the limit followed by `\r\n`: such a CRLF line must pass
            // exactly as the same line with LF does.
            if end - start > maximumLineBytes + 1 {
                discard()
            } else if start > 0 {
                // Compact: move the partial line to the front.
                let count = end - start
                for index in 0..<count { buffer[index] = buffer[start + index] }
                start = 0
                end = count
            }
            if end == buffer.count { discard() }
            if deadline != nil {
                var wanted = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&wanted, 1, wait())
                if ready == 0 { return .notYet }
                if ready < 0 && errno == EINTR { continue }
                // Ready, or poll failed: the read says which.
            }
            let readCount = buffer.withUnsafeMutableBytes { raw in
                read(fd, raw.baseAddress! + end, raw.count - end)
            }
            if readCount < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    // A non-blocking descriptor (a parent may hand one over): wait for input as a blocking one would.
                    var wanted = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    if poll(&wanted, 1, wait()) == 0 { return .notYet }
                    continue
                }
                throw IOError(message: "read failed: \(IOError.describe(errno))")
            }
            if readCount == 0 { finished = true } else { end += readCount }
        }
    }

    /// The first `\n` in the unread bytes: memchr, not a byte-at-a-time search over a line of a kilobyte or more.
    private func newlineIndex() -> Int? {
        guard start < end else { return nil }
        return buffer.withUnsafeBytes { raw -> Int? in
            guard let base = raw.baseAddress, let found = memchr(base + start, Int32(UInt8(ascii: "\n")), end - start) else { return nil }
            return base.distance(to: UnsafeRawPointer(found))
        }
    }

    /// Drops the unread bytes of a line that is over the limit, keeping its head and whether they end in `\r`.
    private mutating func discard() {
        if discarding == 0 { head = Array(buffer[start..<min(end, start + Self.headBytes)]) }
        if end > start { discardedEndsWithCR = buffer[end - 1] == UInt8(ascii: "\r") }
        discarding += end - start
        start = 0
        end = 0
    }

    /// Milliseconds on the monotonic clock (the batch runner's chunk timing uses the same clock).
    static func monotonicMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    /// An over-long line of `count` bytes is done: report it and forget it.
    private mutating func takeOverlong(_ count: Int) -> Line {
        defer {
            discarding = 0
            head = []
            discardedEndsWithCR = false
        }
        return .tooLong(count, head: head)
    }
}

package struct IOError: Error, Sendable, CustomStringConvertible {
    package let message: String
    package var description: String { message }

    package init(message: String) { self.message = message }

    /// `strerror`'s words for an errno, with its number.
    package static func describe(_ code: Int32) -> String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return "\(String(cString: text)) (errno \(code))"
    }
}
