import Dispatch
import Foundation
import TokenGuardCore

/// Runs a batch: reads a bounded chunk of lines, verifies it on `jobs` threads, writes the chunk's verdicts in
/// input order, and repeats. Memory is bounded by the chunk size, whatever the input size.
struct BatchRunner {
    let processor: BatchProcessor
    let jobs: Int
    let showProgress: Bool

    /// Lines per chunk, and bytes per chunk, whichever comes first.
    static let chunkLines = 4096
    static let chunkBytes = 8 << 20

    struct Summary {
        var lines = 0
        var valid = 0
        var counts: [ErrorCode: Int] = [:]
        var seconds = 0.0

        func report() -> String {
            let rate = seconds > 0 ? Double(lines) / seconds : 0
            let codes = counts.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue)=\($0.value)" }.joined(separator: " ")
            return "tokenguard batch: \(lines) lines, \(valid) valid, \(lines - valid) not valid\(codes.isEmpty ? "" : " (\(codes))"), "
                + "\(String(format: "%.2f", seconds)) s, \(Int(rate)) tokens/s\n"
        }
    }

    func run(reader: inout LineReader) throws -> Summary {
        var summary = Summary()
        let started = DispatchTime.now()
        var lastProgress = started
        let output = FileHandle.standardOutput
        var chunk: [LineReader.Line] = []
        chunk.reserveCapacity(Self.chunkLines)
        var done = false
        while !done {
            chunk.removeAll(keepingCapacity: true)
            var bytes = 0
            while chunk.count < Self.chunkLines && bytes < Self.chunkBytes {
                guard let line = try reader.next() else {
                    done = true
                    break
                }
                if case .line(let content) = line {
                    // Blank lines (such as a trailing newline) are not records.
                    if content.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
                    bytes += content.count
                }
                chunk.append(line)
            }
            if chunk.isEmpty { break }
            let results = verify(chunk)
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
            if showProgress && now.uptimeNanoseconds - lastProgress.uptimeNanoseconds > 500_000_000 {
                lastProgress = now
                let elapsed = Double(now.uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
                Stderr.write("\r\(summary.lines) lines, \(Int(Double(summary.lines) / max(elapsed, 0.001))) tokens/s   ")
            }
        }
        if showProgress { Stderr.write("\r\u{1B}[K") }
        summary.seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        return summary
    }

    /// Verifies a chunk with `jobs` concurrent workers; each takes every `jobs`-th line, so order is kept by index.
    /// JWS lines are CPU work and never suspend; opaque-token lines wait on their provider without holding a thread.
    private func verify(_ chunk: [LineReader.Line]) -> [BatchProcessor.Output] {
        let workers = min(jobs, chunk.count)
        let processor = self.processor
        return runBlocking {
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
                var ordered = [BatchProcessor.Output?](repeating: nil, count: chunk.count)
                for await part in group {
                    for (index, output) in part { ordered[index] = output }
                }
                return ordered.compactMap { $0 }
            }
        }
    }
}
