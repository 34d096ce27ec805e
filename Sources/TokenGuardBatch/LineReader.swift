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

    private let fd: Int32
    private let maximumLineBytes: Int
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var finished = false

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

    /// The next line without its terminator (`\n`, or `\r\n`), or nil at end of input.
    /// How much of an over-long line is kept (contract: an `id` within the first 4 KiB is echoed).
    package static let headBytes = 4096

    package mutating func next() throws(IOError) -> Line? {
        var discarding = 0  // bytes of an over-long line skipped so far
        var head: [UInt8] = []  // the first bytes of an over-long line, kept when discarding starts
        func keepHead() { if discarding == 0 { head = Array(buffer[start..<min(end, start + Self.headBytes)]) } }
        while true {
            if let newline = buffer[start..<end].firstIndex(of: UInt8(ascii: "\n")) {
                let lineEnd = newline
                defer { start = newline + 1 }
                if discarding > 0 { return .tooLong(discarding + (lineEnd - start), head: head) }
                var line = Array(buffer[start..<lineEnd])
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                if line.count > maximumLineBytes { return .tooLong(line.count, head: Array(line.prefix(Self.headBytes))) }
                return .line(line)
            }
            if finished {
                if start == end { return discarding > 0 ? .tooLong(discarding, head: head) : nil }
                defer { start = end }
                if discarding > 0 { return .tooLong(discarding + end - start, head: head) }
                var line = Array(buffer[start..<end])
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                return line.count > maximumLineBytes ? .tooLong(line.count, head: Array(line.prefix(Self.headBytes))) : .line(line)
            }
            // One byte over the limit may still be a line at the limit followed by `\r\n`: such a CRLF line must pass
            // exactly as the same line with LF does.
            if end - start > maximumLineBytes + 1 {
                keepHead()
                discarding += end - start
                start = 0
                end = 0
            } else if start > 0 {
                // Compact: move the partial line to the front.
                let count = end - start
                for index in 0..<count { buffer[index] = buffer[start + index] }
                start = 0
                end = count
            }
            if end == buffer.count {
                keepHead()
                discarding += end - start
                start = 0
                end = 0
            }
            let readCount = buffer.withUnsafeMutableBytes { raw in
                read(fd, raw.baseAddress! + end, raw.count - end)
            }
            if readCount < 0 {
                if errno == EINTR { continue }
                throw IOError(message: "read failed: errno \(errno)")
            }
            if readCount == 0 { finished = true } else { end += readCount }
        }
    }
}

package struct IOError: Error, Sendable, CustomStringConvertible {
    package let message: String
    package var description: String { message }
}
