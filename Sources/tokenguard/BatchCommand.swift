import ArgumentParser
import Dispatch
import Foundation
import TokenGuardCore

struct BatchCommand: ParsableCommand {
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

    @Argument(help: "The NDJSON input file, or '-' for standard input.")
    var input: String = "-"

    func validate() throws {
        guard (1...256).contains(jobs) else { throw ValidationError("--jobs must be between 1 and 256") }
    }

    func run() throws {
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
        runBlocking { await registry.prepare() }
        let processor = BatchProcessor(registry: registry, defaultAt: options.at)
        // A line holds a token plus a small envelope; anything longer is refused without being buffered.
        var reader = LineReader(fileDescriptor: fd, maximumLineBytes: configuration.maxTokenBytes + 8192)
        let runner = BatchRunner(processor: processor, jobs: jobs, showProgress: isatty(STDERR_FILENO) == 1)
        let summary: BatchRunner.Summary
        do {
            summary = try runner.run(reader: &reader)
        } catch {
            Stderr.write("tokenguard: \(error)\n")
            throw ExitCodes.usage
        }
        Stderr.write(summary.report())
        if summary.counts[.keysUnavailable, default: 0] > 0 { throw ExitCodes.unavailable }
    }
}
