import Foundation
import Testing
import TokenGuardBatch
import TokenGuardCore
import TokenGuardTestSupport

/// The NDJSON line reader behind `tokenguard batch`: bounded memory, CRLF, over-long lines.
struct LineReaderTests {
    /// What the reader must return, computed the obvious way (the same model as the batch fuzz target).
    static func model(_ content: [UInt8], maximumLineBytes: Int) -> [LineReader.Line] {
        var pieces = content.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map(Array.init)
        if pieces.last?.isEmpty == true { pieces.removeLast() }
        return pieces.map { piece in
            var line = piece
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            return line.count > maximumLineBytes ? .tooLong(line.count, head: Array(line.prefix(LineReader.headBytes))) : .line(line)
        }
    }

    /// A line's bytes, or nil for a line reported too long.
    static func bytes(_ line: LineReader.Line) -> [UInt8]? {
        if case .line(let bytes) = line { return bytes }
        return nil
    }

    static func read(_ content: [UInt8], maximumLineBytes: Int, bufferBytes: Int) throws -> [LineReader.Line] {
        var template = Array("/tmp/tokenguard-lines-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        try #require(fd >= 0)
        defer {
            close(fd)
            unlink(&template)
        }
        _ = content.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        lseek(fd, 0, SEEK_SET)
        var reader = LineReader(fileDescriptor: fd, maximumLineBytes: maximumLineBytes, bufferBytes: bufferBytes)
        var lines: [LineReader.Line] = []
        while let line = try reader.next() { lines.append(line) }
        return lines
    }

    @Test("fuzz regression: a CRLF line exactly at the limit is a line, as it is with LF (Fuzz/regressions/batch)")
    func crlfLineAtLimit() throws {
        // The batch fuzz target's first finding: limit 17, a 17-byte line, then \r\n. It was reported too long
        // because the reader gave up on the line one byte (the \r) before seeing its end.
        let line = Array(#"{"iD":"a.a"#.utf8) + [0xD4, 0x9D] + Array(#".cc"}"#.utf8)
        #expect(line.count == 17)
        for buffer in [1, 17, 18, 19, 64, 65_536] {
            #expect(try Self.read(line + [13, 10], maximumLineBytes: 17, bufferBytes: buffer) == [.line(line)], "buffer \(buffer)")
            #expect(try Self.read(line + [10], maximumLineBytes: 17, bufferBytes: buffer) == [.line(line)], "buffer \(buffer)")
            #expect(try Self.read(line + [13], maximumLineBytes: 17, bufferBytes: buffer) == [.line(line)], "buffer \(buffer), no final newline")
            let over = try Self.read(line + [65, 13, 10], maximumLineBytes: 17, bufferBytes: buffer)
            #expect(over.count == 1 && Self.bytes(over[0]) == nil, "buffer \(buffer): 18 bytes is too long")
        }
    }

    @Test("the line reader matches the obvious split for 3,000 seeded inputs, with buffers as small as one line")
    func lineReaderModel() throws {
        var random = SeededRandom(seed: 0x51_0a_c0de)
        let alphabet: [UInt8] = Array("ab{}\"\r\n\n\n".utf8)
        for round in 0..<3000 {
            let length = Int.random(in: 0...300, using: &random)
            let content = (0..<length).map { _ in alphabet.randomElement(using: &random)! }
            let maximum = Int.random(in: 1...40, using: &random)
            let buffer = Int.random(in: 1...64, using: &random)
            let lines = try Self.read(content, maximumLineBytes: maximum, bufferBytes: buffer)
            let expected = Self.model(content, maximumLineBytes: maximum)
            // Too-long lines are reported with a length: the line's, without a final `\r`, as in the model.
            let shape = lines.map(Self.bytes)
            let expectedShape = expected.map(Self.bytes)
            #expect(
                shape == expectedShape,
                "round \(round): limit \(maximum), buffer \(buffer), input \(String(decoding: content, as: UTF8.self).debugDescription)")
            #expect(lines == expected, "lengths, round \(round): limit \(maximum), buffer \(buffer)")
            if shape != expectedShape { break }
        }
    }

    @Test("lines that arrive in pieces through a pipe come out whole: a read that would wait says notYet and resumes")
    func piecesThroughAPipe() throws {
        var random = SeededRandom(seed: 0x9e_ce_5a11)
        let alphabet: [UInt8] = Array("ab{}\"\r\n\n".utf8)
        for round in 0..<1500 {
            let length = Int.random(in: 0...300, using: &random)
            let content = (0..<length).map { _ in alphabet.randomElement(using: &random)! }
            let maximum = Int.random(in: 1...40, using: &random)
            let buffer = Int.random(in: 1...64, using: &random)
            var ends: [Int32] = [0, 0]
            try #require(pipe(&ends) == 0)
            // No child another test spawns may keep the write end open (its end of input would never come).
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            defer { close(ends[0]) }
            var reader = LineReader(fileDescriptor: ends[0], maximumLineBytes: maximum, bufferBytes: buffer)
            var lines: [LineReader.Line] = []
            var offset = 0
            var waits = 0
            while offset < content.count {
                let piece = min(Int.random(in: 1...20, using: &random), content.count - offset)
                let written = content[offset..<offset + piece].withUnsafeBytes { write(ends[1], $0.baseAddress, piece) }
                try #require(written == piece)
                offset += piece
                reading: while true {
                    switch try reader.next(waitingAtMost: 0) {
                    case .line(let line): lines.append(line)
                    case .notYet:
                        waits += 1
                        break reading
                    case .endOfInput: Issue.record("end of input before the writer closed")
                    }
                }
            }
            close(ends[1])
            while let line = try reader.next() { lines.append(line) }
            let expected = Self.model(content, maximumLineBytes: maximum)
            let context = "round \(round): limit \(maximum), buffer \(buffer), input \(String(decoding: content, as: UTF8.self).debugDescription)"
            #expect(lines.map(Self.bytes) == expected.map(Self.bytes), "\(context)")
            // Lengths too: an over-long CRLF line's `\r` is left out whether its end was read whole or discarded.
            #expect(lines == expected, "\(context)")
            // An over-long line's head is the start of that line, however its pieces arrived.
            for (line, model) in zip(lines, expected) {
                guard case .tooLong(_, let head) = line, case .tooLong(_, let full) = model else { continue }
                #expect(!head.isEmpty && (full + [13]).starts(with: head), "head \(head) of \(full), \(context)")
            }
            #expect(content.isEmpty || waits > 0)
            if lines.map(Self.bytes) != expected.map(Self.bytes) { break }
        }
    }
}

@Suite("Batch progress line")
struct ProgressLineTests {
    @Test("a clock reading that is NaN, infinite, zero or negative shows a rate of 0 and never traps")
    func oddElapsedTimes() {
        for elapsed in [Double.nan, .infinity, -.infinity, 0, -1, 1e-300, 1e300] {
            let line = BatchRunner.progressLine(lines: 1000, elapsed: elapsed, bytesRead: 50, totalBytes: 100)
            #expect(line.contains("1000 lines"), "\(elapsed): \(line)")
        }
        #expect(BatchRunner.progressLine(lines: 1000, elapsed: 2, bytesRead: 50, totalBytes: 100).contains("500 tokens/s"))
    }
}
