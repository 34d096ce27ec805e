import Foundation
import Hummingbird
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import TokenGuardBatch
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardServer
import TokenGuardService
import TokenGuardTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The bench re-runs itself as a child process for the server and batch sections, so that their throughput and
/// memory are measured in a process of their own with exactly the service's code paths.
enum Children {
    static var executable: String { Bundle.main.executablePath ?? CommandLine.arguments[0] }

    /// `bench --serve-child CONFIG PORT`: the real HTTP application on 127.0.0.1:PORT until SIGTERM.
    static func serve(config: String, port: Int) async throws {
        let configuration = try Configuration.load(path: config)
        // Metrics as `serve` records them (Prometheus), so their cost is part of what is measured.
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: prometheus))
        let registry = VerifierRegistry(configuration: configuration)
        let kinds = Dictionary(uniqueKeysWithValues: configuration.providers.map { ($0.name, $0.kind) })
        var logger = Logger(label: "bench-server")
        logger.logLevel = .warning
        let app = buildApplication(
            registry: registry, kinds: kinds, host: "127.0.0.1", port: port, settings: configuration.server, prometheus: prometheus,
            logger: logger)
        try await app.runService()
    }

    /// `bench --batch-child CONFIG`: `tokenguard batch`'s pipeline over standard input, verdicts to /dev/null.
    static func batch(config: String) async throws {
        let configuration = try Configuration.load(path: config)
        let registry = VerifierRegistry(configuration: configuration)
        let reader = LineReader(fileDescriptor: STDIN_FILENO, maximumLineBytes: configuration.maxTokenBytes + 8192)
        let sinkDescriptor = open("/dev/null", O_WRONLY)
        guard sinkDescriptor >= 0 else { throw RunnerError("cannot open /dev/null") }
        defer { close(sinkDescriptor) }
        let sink = FileDescriptorWriter(fileDescriptor: sinkDescriptor)
        let runner = BatchRunner(
            processor: BatchProcessor(registry: registry, defaultAt: nil), jobs: ProcessInfo.processInfo.activeProcessorCount, progress: nil,
            shard: nil, totalBytes: nil, output: sink)
        let summary = try await runner.run(reader: reader)
        FileHandle.standardError.write(Data("\(summary.lines) \(summary.valid) \(ownPeakKiB() ?? -1)\n".utf8))
    }

    /// This process's own peak resident set (`VmHWM`, KiB), or nil where /proc does not say. Not `ru_maxrss`: a child
    /// started by `posix_spawn` shares its parent's memory until `exec`, and Linux carries that memory's high-water mark
    /// into the child's `ru_maxrss`, so the child would report the bench's own size whenever that is larger.
    static func ownPeakKiB() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
        }
        return nil
    }

    /// Spawns the bench as a batch child fed by `feed` through a pipe; returns wall seconds, peak RSS (MiB) and the
    /// child's "lines valid" report. The peak is the one the child reports of its own memory (``ownPeakKiB()``); `wait4`'s
    /// `ru_maxrss` only where it could not, since it can be the bench's own size (see there).
    static func runBatch(config: String, feed: (Int32) -> Void) throws -> (seconds: Double, peakMiB: Double, report: String) {
        var input: [Int32] = [0, 0]
        var report: [Int32] = [0, 0]
        guard pipe(&input) == 0, pipe(&report) == 0 else { throw RunnerError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], STDIN_FILENO)
        posix_spawn_file_actions_adddup2(&actions, report[1], STDERR_FILENO)
        posix_spawn_file_actions_addclose(&actions, input[1])
        posix_spawn_file_actions_addclose(&actions, report[0])
        let arguments = [executable, "--batch-child", config]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let started = Date()
        guard posix_spawn(&pid, executable, &actions, nil, &argv, environ) == 0 else { throw RunnerError("posix_spawn failed") }
        close(input[0])
        close(report[1])
        feed(input[1])
        close(input[1])
        var status: Int32 = 0
        var usage = rusage()
        _ = wait4(pid, &status, 0, &usage)
        let seconds = Date().timeIntervalSince(started)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(report[0], &buffer, buffer.count)
        close(report[0])
        let text = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
        var fields = text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ")
        // Both in KiB on Linux.
        var peakKiB = Int(usage.ru_maxrss)
        if fields.count == 3 {
            if let own = Int(fields[2]), own > 0 { peakKiB = own }
            fields.removeLast()
        }
        return (seconds, Double(peakKiB) / 1024, fields.joined(separator: " "))
    }

    /// Writes all of `bytes` to `fd`.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + sent, bytes.count - sent) }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }
}
