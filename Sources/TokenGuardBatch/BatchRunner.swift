import Dispatch
import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardService

/// Runs a batch (`tokenguard batch`): reads a bounded chunk of lines, verifies it with `jobs` concurrent workers,
/// writes the chunk's verdicts in input order, and repeats. The next chunk is read while one is verified, and a
/// chunk's verdicts are written while the next is verified, so the workers never wait for output, and a producer that
/// waits for its answers gets them. Memory is bounded by two chunks read and two answered, whatever the input size.
package struct BatchRunner: Sendable {
    package let processor: BatchProcessor
    package let jobs: Int
    /// Called with a progress line about four times a second (nil: no progress).
    package let progress: (@Sendable (String) -> Void)?
    /// Only records whose index mod `count` is `index` (0-based), when set.
    package let shard: (index: Int, count: Int)?
    /// The input's size when it is a regular file: progress then shows a percentage and an ETA.
    package let totalBytes: Int?
    /// Where verdict lines go.
    package let output: FileDescriptorWriter

    package init(
        processor: BatchProcessor, jobs: Int, progress: (@Sendable (String) -> Void)?, shard: (index: Int, count: Int)?, totalBytes: Int?,
        output: FileDescriptorWriter = .standardOutput
    ) {
        self.processor = processor
        self.jobs = jobs
        self.progress = progress
        self.shard = shard
        self.totalBytes = totalBytes
        self.output = output
    }

    /// Lines per chunk, and bytes per chunk, whichever comes first.
    static let chunkLines = 1024
    static let chunkBytes = 2 << 20
    /// A chunk is also cut when the workers wait for it and no new line has come whole for `idleMilliseconds`, or
    /// its first line has waited `holdMilliseconds`: a streaming producer's lines (`tail -F log | tokenguard batch -`)
    /// are answered within about that, however steadily they arrive, while a fast producer still fills whole chunks.
    static let idleMilliseconds: Int64 = 10
    static let holdMilliseconds: Int64 = 50
    /// How long the input has to end after the output's reader left with nothing left to write.
    static let readerGoneGraceMilliseconds: Int64 = 5000

    package struct Summary: Sendable {
        package var lines = 0
        package var valid = 0
        package var counts: [ErrorCode: Int] = [:]
        package var seconds = 0.0

        package func report() -> String {
            let rate = seconds > 0 ? Double(lines) / seconds : 0
            let codes = counts.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue)=\($0.value)" }.joined(separator: " ")
            return "tokenguard batch: \(lines) lines, \(valid) valid, \(lines - valid) not valid\(codes.isEmpty ? "" : " (\(codes))"), "
                + "\(String(format: "%.2f", seconds)) s, \(Int(rate)) tokens/s\n"
        }
    }

    /// Reads `reader` to its end. A read error ends the run after the lines read before it are answered.
    package func run(reader: LineReader) async throws -> Summary {
        var summary = Summary()
        let started = DispatchTime.now()
        var lastProgress = started
        let source = ChunkSource(reader: reader, shard: shard)
        let sink = ChunkSink(output: output)
        let watch = VanishedReaderWatch.start(output: output.fileDescriptor) { gone in
            if gone {
                sink.readerLeft(IOError(message: "write failed: \(IOError.describe(EPIPE))"))
            } else {
                sink.readerReturned()
            }
        }
        defer { watch?.stop() }
        var pending = Task { await source.next() }
        while true {
            source.consumerWaiting.store(true, ordering: .releasing)
            let chunk = try await Self.next(pending, unlessFailed: sink)
            source.consumerWaiting.store(false, ordering: .releasing)
            // The next chunk is read while this one is verified; at most two are in memory.
            if !chunk.isLast { pending = Task { await source.next() } }
            if !chunk.lines.isEmpty {
                let results = await verify(chunk.lines)
                for result in results {
                    summary.lines += 1
                    if let code = result.code { summary.counts[code, default: 0] += 1 } else { summary.valid += 1 }
                }
                // One chunk is written at a time: a slow reader of the output holds the run back instead of letting
                // answers pile up, and a failed write ends the run at the next chunk.
                try await sink.finished()
                sink.write(results)
            }
            let now = DispatchTime.now()
            if let progress, now.uptimeNanoseconds - lastProgress.uptimeNanoseconds > 250_000_000 {
                lastProgress = now
                let elapsed = Double(now.uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
                progress("\r" + Self.progressLine(lines: summary.lines, elapsed: elapsed, bytesRead: chunk.bytesRead, totalBytes: totalBytes))
            }
            if let error = chunk.error {
                // What was read before the failure is answered first.
                try await sink.finished()
                throw error
            }
            if chunk.isLast { break }
        }
        try await sink.finished()
        progress?("\r\u{1B}[K")
        summary.seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        return summary
    }

    /// The next chunk, or the first failed write's error if that comes first: a run whose output is gone ends at once,
    /// not when its input next has a line (a producer may be idle for hours). The read goes on, but the run is ending.
    /// A reader seen to leave with no write failed (``VanishedReaderWatch``) ends the run only if the input has not
    /// ended within ``readerGoneGraceMilliseconds``: `batch file | head -n 3` that got all its answers exits 0, however
    /// the reader's exit and the input's end race (red team 24), nor if a named pipe has a reader again by then.
    private static func next(_ pending: Task<ChunkSource.Chunk, Never>, unlessFailed sink: ChunkSink) async throws -> ChunkSource.Chunk {
        let outcome: Result<ChunkSource.Chunk, IOError> = await withCheckedContinuation { continuation in
            let first = ResumeOnce(continuation)
            sink.whenFailed { error, departure in
                guard let departure else { return first.resume(returning: .failure(error)) }
                Task {
                    try? await Task.sleep(for: .milliseconds(readerGoneGraceMilliseconds))
                    // A reader the output has now but the watch has not seen come back is waited for (the watch looks
                    // every 100 ms); bounded, though the watch settles it at its next look.
                    for _ in 0..<50 {
                        switch await sink.graceEnded(since: departure) {
                        case .failed(let error): return first.resume(returning: .failure(error))
                        case .readerBack: return
                        case .unsettled: try? await Task.sleep(for: .milliseconds(100))
                        }
                    }
                }
            }
            Task { first.resume(returning: .success(await pending.value)) }
        }
        sink.withdrawFailureWaiter()
        return try outcome.get()
    }

    /// `[#######.............]  35%  120000 lines  41000 tokens/s  ETA 0:07` (bar and ETA only for a file).
    package static func progressLine(lines: Int, elapsed: Double, bytesRead: Int, totalBytes: Int?) -> String {
        // A clock reading that is not a finite positive number (never expected) shows a rate of 0, never traps.
        let rate = elapsed.isFinite && elapsed > 0 ? Double(lines) / max(elapsed, 0.001) : 0
        var text = "\(lines) lines  \(Int(exactly: rate.rounded(.down)) ?? 0) tokens/s"
        if let totalBytes, totalBytes > 0 {
            let fraction = min(Double(bytesRead) / Double(totalBytes), 1)
            let filled = Int(fraction * 20)
            let remaining = fraction > 0 && elapsed.isFinite ? elapsed * (1 - fraction) / fraction : 0
            let seconds = remaining.isFinite ? Int(min(max(remaining, 0), 359_999).rounded()) : 0
            text =
                "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: 20 - filled) + "] "
                + String(format: "%3d%%  ", Int(fraction * 100)) + text + "  ETA \(seconds / 60):" + String(format: "%02d", seconds % 60)
        }
        return text + "   "
    }

    /// Verifies a chunk with `jobs` concurrent workers; each takes the next line not taken yet, so a worker slowed by
    /// another thread on its core (the reader's, the writer's) leaves its share to the others instead of holding up
    /// the chunk. Order is kept by index. JWS lines are CPU work and never suspend; opaque-token lines wait on their
    /// provider without holding a thread.
    private func verify(_ chunk: [LineReader.Line]) async -> [BatchProcessor.Output] {
        let workers = min(jobs, chunk.count)
        let processor = self.processor
        let next = NextIndex()
        // Collected outside the group: returning a value from a task group's closure was miscompiled at -O (see
        // VerifyRoutes.verifyItems).
        var ordered = [BatchProcessor.Output?](repeating: nil, count: chunk.count)
        await withTaskGroup(of: [(Int, BatchProcessor.Output)].self) { group in
            for _ in 0..<workers {
                group.addTask {
                    var local: [(Int, BatchProcessor.Output)] = []
                    local.reserveCapacity(chunk.count / workers + 1)
                    while true {
                        let index = next.take()
                        guard index < chunk.count else { break }
                        local.append((index, await processor.process(chunk[index])))
                    }
                    return local
                }
            }
            for await part in group {
                for (index, output) in part { ordered[index] = output }
            }
        }
        return ordered.compactMap { $0 }
    }
}

/// The next line of a chunk for a worker to take.
private final class NextIndex: Sendable {
    private let counter = Atomic<Int>(0)

    func take() -> Int { counter.add(1, ordering: .relaxed).oldValue }
}

/// Resumes a continuation with the first of several outcomes; the later ones are dropped.
private final class ResumeOnce<Value: Sendable>: Sendable {
    private let continuation: Mutex<CheckedContinuation<Value, Never>?>

    init(_ continuation: CheckedContinuation<Value, Never>) {
        self.continuation = Mutex(continuation)
    }

    func resume(returning value: Value) {
        continuation.withLock { pending in
            pending?.resume(returning: value)
            pending = nil
        }
    }
}

/// Writes each chunk's verdicts, in order, on a dispatch queue of its own: a write that blocks on a slow reader of the
/// output must not hold a cooperative thread, and the workers go on to the next chunk while the bytes are copied out.
final class ChunkSink: @unchecked Sendable {
    // @unchecked Sendable: every stored var is touched only on `queue`.
    private let output: FileDescriptorWriter
    private let queue = DispatchQueue(label: "tokenguard.batch.write")
    /// One chunk's output text, reused: its pages stay mapped from one chunk to the next.
    private var buffer: [UInt8] = []
    private var failure: IOError?
    /// The output's reader is gone, seen without a write (nothing may be left to write): not itself a failure.
    private var readerGone: IOError?
    /// Counts the reader's departures: a grace period acts only on the departure that started it, not on a later
    /// one whose own grace has not run out (red team 26).
    private var departures = 0
    /// Told of the first failed write (nil) or of the reader's leaving (its departure's number), while the run waits
    /// for input.
    private var failureWaiter: (@Sendable (IOError, Int?) -> Void)?

    init(output: FileDescriptorWriter) {
        self.output = output
    }

    /// Starts writing `results`, one line each, after whatever was handed over before.
    func write(_ results: [BatchProcessor.Output]) {
        queue.async {
            // After a failed write nothing more is written: the output is gone or broken, and the run is ending.
            guard self.failure == nil else { return }
            self.buffer.removeAll(keepingCapacity: true)
            for result in results {
                self.buffer.append(contentsOf: result.json)
                self.buffer.append(UInt8(ascii: "\n"))
            }
            do throws(IOError) {
                try self.output.write(self.buffer)
                // Written, so read: a named pipe's new reader (a lost one is seen again by the watch or the next write).
                self.readerGone = nil
            } catch {
                self.failure = error
                self.failureWaiter?(error, nil)
                self.failureWaiter = nil
            }
        }
    }

    /// The output's reader has gone, seen without a write: a waiter hears of it, and stays to hear of a failed write
    /// (a reader that returns and leaves again is heard of again); a later write still fails on its own, and a run
    /// with nothing left to write still ends well.
    func readerLeft(_ error: IOError) {
        queue.async {
            guard self.failure == nil, self.readerGone == nil else { return }
            self.readerGone = error
            self.departures += 1
            self.failureWaiter?(error, self.departures)
        }
    }

    /// A named pipe's output has a reader again.
    func readerReturned() {
        queue.async { self.readerGone = nil }
    }

    enum GraceOutcome: Sendable {
        /// A write failed, or the reader that left at this departure is still away.
        case failed(IOError)
        /// The reader came back (or left again since: a later departure has a grace period of its own).
        case readerBack
        /// The output has a reader now that the watch has not seen yet.
        case unsettled
    }

    /// How a grace period started at departure `departure` ends: the output is looked at now, not only as the watch
    /// last saw it.
    func graceEnded(since departure: Int) async -> GraceOutcome {
        await withCheckedContinuation { continuation in
            queue.async {
                if let failure = self.failure { return continuation.resume(returning: .failed(failure)) }
                guard let readerGone = self.readerGone, self.departures == departure else { return continuation.resume(returning: .readerBack) }
                let absent = VanishedReaderWatch.readerAbsent(self.output.fileDescriptor) ?? true
                continuation.resume(returning: absent ? .failed(readerGone) : .unsettled)
            }
        }
    }

    /// Calls `body` with the first failed write's error (departure nil) or the reader's leaving (its departure's
    /// number): at once if either has happened, and whenever one does, until ``withdrawFailureWaiter()``.
    func whenFailed(_ body: @escaping @Sendable (IOError, Int?) -> Void) {
        queue.async {
            if let failure = self.failure {
                body(failure, nil)
                return
            }
            if let readerGone = self.readerGone { body(readerGone, self.departures) }
            self.failureWaiter = body
        }
    }

    func withdrawFailureWaiter() {
        queue.async { self.failureWaiter = nil }
    }

    /// Waits until everything handed over is written; throws the first write's failure.
    func finished() async throws {
        let failure: IOError? = await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.failure) }
        }
        if let failure { throw failure }
    }
}

/// Cuts the input into chunks on a dispatch queue of its own: a read that blocks on a slow producer must not hold
/// one of the cooperative threads the workers verify on.
final class ChunkSource: @unchecked Sendable {
    // @unchecked Sendable: every stored var is touched only on `queue`, one read at a time.
    private var reader: LineReader
    private let shard: (index: Int, count: Int)?
    private let queue = DispatchQueue(label: "tokenguard.batch.read")
    private var recordIndex = 0
    private var bytesRead = 0
    private var finished = false
    /// Set while the run waits for a chunk: only then is a started chunk cut when input pauses.
    let consumerWaiting = Atomic<Bool>(false)

    struct Chunk: Sendable {
        var lines: [LineReader.Line] = []
        /// The chunk's line bytes, and the input's bytes read so far (for progress).
        var bytes = 0
        var bytesRead = 0
        /// No chunk follows: the input ended, or reading it failed (`error`).
        var isLast = false
        var error: IOError?
    }

    init(reader: LineReader, shard: (index: Int, count: Int)?) {
        self.reader = reader
        self.shard = shard
    }

    func next() async -> Chunk {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.read()) }
        }
    }

    private func read() -> Chunk {
        var chunk = Chunk()
        chunk.lines.reserveCapacity(BatchRunner.chunkLines)
        fill(&chunk)
        chunk.bytesRead = bytesRead
        return chunk
    }

    private func fill(_ chunk: inout Chunk) {
        guard !finished else {
            chunk.isLast = true
            return
        }
        var firstLineAt: Int64 = 0
        while chunk.lines.count < BatchRunner.chunkLines && chunk.bytes < BatchRunner.chunkBytes {
            // An empty chunk waits for input as long as it takes. A started one waits for the next line at most
            // `idleMilliseconds` at a time, and is cut once the workers wait for it and input pauses or its first
            // line has been held `holdMilliseconds`.
            var wait: Int64? = nil
            if !chunk.lines.isEmpty {
                wait = BatchRunner.idleMilliseconds
                if consumerWaiting.load(ordering: .acquiring) {
                    let held = LineReader.monotonicMilliseconds() - firstLineAt
                    if held >= BatchRunner.holdMilliseconds { return }
                    wait = min(BatchRunner.idleMilliseconds, BatchRunner.holdMilliseconds - held)
                }
            }
            let next: LineReader.Next
            do {
                next = try reader.next(waitingAtMost: wait.map { Int32($0) })
            } catch {
                finished = true
                chunk.isLast = true
                chunk.error = error
                return
            }
            let line: LineReader.Line
            switch next {
            case .notYet:
                if consumerWaiting.load(ordering: .acquiring) { return }
                continue
            case .endOfInput:
                finished = true
                chunk.isLast = true
                return
            case .line(let read): line = read
            }
            switch line {
            case .line(let content):
                bytesRead += content.count + 1
                // Blank lines (such as a trailing newline) are not records.
                if content.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            case .tooLong(let count, _):
                bytesRead += count + 1
            }
            defer { recordIndex += 1 }
            if let shard, recordIndex % shard.count != shard.index { continue }
            if case .line(let content) = line { chunk.bytes += content.count }
            if chunk.lines.isEmpty { firstLineAt = LineReader.monotonicMilliseconds() }
            chunk.lines.append(line)
        }
    }

}
