import Dispatch
import Foundation
import TokenGuardCore
import TokenGuardService

/// Runs a batch (`tokenguard batch`): reads a bounded chunk of lines, verifies it with `jobs` concurrent workers,
/// writes the chunk's verdicts in input order, and repeats. Memory is bounded by the chunk size, whatever the
/// input size.
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
    package let output: FileHandle

    package init(
        processor: BatchProcessor, jobs: Int, progress: (@Sendable (String) -> Void)?, shard: (index: Int, count: Int)?, totalBytes: Int?,
        output: FileHandle = .standardOutput
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

    package func run(reader: inout LineReader) async throws -> Summary {
        var summary = Summary()
        let started = DispatchTime.now()
        var lastProgress = started
        var chunk: [LineReader.Line] = []
        chunk.reserveCapacity(Self.chunkLines)
        var done = false
        var recordIndex = 0
        var bytesRead = 0
        while !done {
            chunk.removeAll(keepingCapacity: true)
            var bytes = 0
            while chunk.count < Self.chunkLines && bytes < Self.chunkBytes {
                guard let line = try reader.next() else {
                    done = true
                    break
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
                if case .line(let content) = line { bytes += content.count }
                chunk.append(line)
            }
            if chunk.isEmpty { break }
            let results = await verify(chunk)
            var out: [UInt8] = []
            out.reserveCapacity(bytes * 2 + results.count * 64)
            for result in results {
                out.append(contentsOf: result.json)
                out.append(UInt8(ascii: "\n"))
                summary.lines += 1
                if let code = result.code { summary.counts[code, default: 0] += 1 } else { summary.valid += 1 }
            }
            output.write(Data(out))
            let now = DispatchTime.now()
            if let progress, now.uptimeNanoseconds - lastProgress.uptimeNanoseconds > 250_000_000 {
                lastProgress = now
                let elapsed = Double(now.uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
                progress("\r" + Self.progressLine(lines: summary.lines, elapsed: elapsed, bytesRead: bytesRead, totalBytes: totalBytes))
            }
        }
        progress?("\r\u{1B}[K")
        summary.seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        return summary
    }

    /// `[#######.............]  35%  120000 lines  41000 tokens/s  ETA 0:07` (bar and ETA only for a file).
    package static func progressLine(lines: Int, elapsed: Double, bytesRead: Int, totalBytes: Int?) -> String {
        let rate = Double(lines) / max(elapsed, 0.001)
        var text = "\(lines) lines  \(Int(rate)) tokens/s"
        if let totalBytes, totalBytes > 0 {
            let fraction = min(Double(bytesRead) / Double(totalBytes), 1)
            let filled = Int(fraction * 20)
            let remaining = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0
            let seconds = remaining.isFinite ? Int(min(max(remaining, 0), 359_999).rounded()) : 0
            text =
                "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: 20 - filled) + "] "
                + String(format: "%3d%%  ", Int(fraction * 100)) + text + "  ETA \(seconds / 60):" + String(format: "%02d", seconds % 60)
        }
        return text + "   "
    }

    /// Verifies a chunk with `jobs` concurrent workers; each takes every `jobs`-th line, so order is kept by index.
    /// JWS lines are CPU work and never suspend; opaque-token lines wait on their provider without holding a thread.
    private func verify(_ chunk: [LineReader.Line]) async -> [BatchProcessor.Output] {
        let workers = min(jobs, chunk.count)
        let processor = self.processor
        // Collected outside the group: returning a value from a task group's closure was miscompiled at -O (see
        // VerifyRoutes.verifyItems).
        var ordered = [BatchProcessor.Output?](repeating: nil, count: chunk.count)
        await withTaskGroup(of: [(Int, BatchProcessor.Output)].self) { group in
            for worker in 0..<workers {
                group.addTask {
                    var local: [(Int, BatchProcessor.Output)] = []
                    local.reserveCapacity(chunk.count / workers + 1)
                    var index = worker
                    while index < chunk.count {
                        local.append((index, await processor.process(chunk[index])))
                        index += workers
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
