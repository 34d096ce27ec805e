import ArgumentParser
import Dispatch
import Foundation
import TokenGuardBatch
import TokenGuardCore
import TokenGuardService

struct BatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "batch",
        abstract: "Verify an NDJSON token log; print one verdict line per input line, in input order.",
        discussion: """
            Input lines: {"id": any, "provider": "...", "token": "...", "nonce": "..."?, "at": unix?}
            A bad line gets its own invalid_request verdict; the run never aborts on one. A summary goes to \
            standard error at the end. Exit status: 0 when every answer is final, 3 when any was keys_unavailable, \
            2 on a usage, config or input error.
            """
    )

    @OptionGroup var options: CommonOptions

    @Option(name: .long, help: "Worker threads (default: the number of cores).")
    var jobs: Int = ProcessInfo.processInfo.activeProcessorCount

    @Option(name: .long, help: "Process only shard I of N (0-based): records whose index mod N is I, so N machines split one log.")
    var shard: String?

    @Argument(help: "The NDJSON input file, or '-' for standard input.")
    var input: String = "-"

    func validate() throws {
        guard (1...256).contains(jobs) else { throw ValidationError("--jobs must be between 1 and 256") }
        _ = try parsedShard()
    }

    func parsedShard() throws -> (index: Int, count: Int)? {
        guard let shard else { return nil }
        let parts = shard.split(separator: "/")
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]), count >= 1, count <= 1_000_000, (0..<count).contains(index)
        else {
            throw ValidationError("--shard must be I/N with 0 ≤ I < N, e.g. 0/4")
        }
        return (index, count)
    }

    func run() async throws {
        try Stdout.requireOpen()
        let (configuration, registry) = try ConfigLoading.registry(path: options.config)
        let fd: Int32
        if input == "-" {
            fd = STDIN_FILENO
        } else {
            fd = open(input, O_RDONLY)
            guard fd >= 0 else {
                Stderr.write("tokenguard: cannot open \(input)\n")
                throw ExitCodes.usage
            }
        }
        defer { if fd != STDIN_FILENO { close(fd) } }
        // Fetch keys once up front; the workers then verify from memory.
        await registry.prepare()
        let processor = BatchProcessor(registry: registry, defaultAt: options.at)
        // A line holds a token plus a small envelope; anything longer is refused without being buffered.
        let reader = LineReader(fileDescriptor: fd, maximumLineBytes: configuration.maxTokenBytes + 8192)
        var totalBytes: Int? = nil
        var info = stat()
        if fd != STDIN_FILENO, fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG { totalBytes = Int(info.st_size) }
        let writeProgress: @Sendable (String) -> Void = { @Sendable line in Stderr.write(line) }
        let progress: (@Sendable (String) -> Void)? = isatty(STDERR_FILENO) == 1 ? writeProgress : nil
        let runner = BatchRunner(processor: processor, jobs: jobs, progress: progress, shard: try parsedShard(), totalBytes: totalBytes)
        let summary: BatchRunner.Summary
        // A long batch keeps reading revocations (a `tokenguard revoke` during the run applies within the window).
        let revocationRefresh = registry.revocations.map { revocations in Task { await revocations.runRefreshLoop() } }
        defer { revocationRefresh?.cancel() }
        do {
            summary = try await runner.run(reader: reader)
        } catch {
            Stderr.write("tokenguard: \(error)\n")
            throw ExitCodes.usage
        }
        Stderr.write(summary.report())
        // Not every answer is final when any was "cannot decide now" (keys, replay store, timeout): exit 3.
        if summary.counts.contains(where: { $0.key.isRetryable && $0.value > 0 }) { throw ExitCodes.unavailable }
    }
}
