import Foundation

/// Runs the built `tokenguard` binary with files for its standard streams (no pipe deadlocks on large output).
package enum BinaryRunner {
    /// Under scripts/sanitize.sh, the tokenguard processes the tests start take their ASan options from
    /// `TOKENGUARD_CHILD_ASAN_OPTIONS` (see that script for why their leak check is off).
    package static func applyChildSanitizerOptions(_ env: inout [String: String]) {
        if let options = env["TOKENGUARD_CHILD_ASAN_OPTIONS"] { env["ASAN_OPTIONS"] = options }
    }

    /// Copies a stopped child's log into `TOKENGUARD_SANITIZER_REPORTS` when a sanitizer reported in it
    /// (scripts/sanitize.sh sets the folder and fails the run when anything is in it): a report the test never
    /// looked at — a race while a server shuts down, or after its last request — still fails the run.
    package static func keepSanitizerReport(
        logPath: String, child: String, folder: String? = ProcessInfo.processInfo.environment["TOKENGUARD_SANITIZER_REPORTS"]
    ) {
        guard let folder, !folder.isEmpty, let log = try? String(contentsOfFile: logPath, encoding: .utf8),
            log.contains("WARNING: ThreadSanitizer") || log.contains("ERROR: AddressSanitizer")
        else { return }
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let name = "\(child)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString).log"
        try? log.write(toFile: URL(fileURLWithPath: folder).appendingPathComponent(name).path, atomically: true, encoding: .utf8)
    }

    package struct Output {
        package let status: Int32
        package let stdout: String
        package let stderr: String
    }

    /// The `tokenguard` executable: `TOKENGUARD_BIN` when set (the hardening run points the end-to-end tests at
    /// the release binary), else the one next to the test bundle (same build folder), or under `.build/debug`.
    package static func executable() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["TOKENGUARD_BIN"], !path.isEmpty {
            let url = URL(fileURLWithPath: path, relativeTo: TestPaths.repositoryRoot)
            guard FileManager.default.isExecutableFile(atPath: url.path) else { throw RunnerError("TOKENGUARD_BIN \(path) is not executable") }
            return url
        }
        let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var candidates: [URL] = []
        var directory = testBinary.deletingLastPathComponent()
        for _ in 0..<4 {
            candidates.append(directory.appendingPathComponent("tokenguard"))
            directory = directory.deletingLastPathComponent()
        }
        candidates.append(TestPaths.repositoryRoot.appendingPathComponent(".build/debug/tokenguard"))
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate.path) {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: candidate.path, isDirectory: &isDirectory), !isDirectory.boolValue { return candidate }
        }
        throw RunnerError("tokenguard binary not found next to \(testBinary.path); build it first (swift build)")
    }

    /// Runs `tokenguard ARGUMENTS` to its end, waiting on a thread of its own (``onOwnThread(_:)``).
    package static func run(_ arguments: [String], stdin: String = "", environment: [String: String] = [:], timeout: TimeInterval = 120)
        async throws -> Output
    {
        try await onOwnThread { try runBlocking(arguments, stdin: stdin, environment: environment, timeout: timeout) }
    }

    /// Runs `/bin/sh -c SCRIPT` with `$0` the `tokenguard` executable: for arguments Foundation cannot pass, such as
    /// bytes that are not UTF-8 (`"$0" verify --nonce "$(printf 'n\\377')"`).
    package static func runInShell(_ script: String, timeout: TimeInterval = 120) async throws -> Output {
        let binary = try executable().path
        return try await onOwnThread {
            try runBlocking(["-c", script, binary], stdin: "", environment: [:], timeout: timeout, executable: URL(fileURLWithPath: "/bin/sh"))
        }
    }

    private static func runBlocking(
        _ arguments: [String], stdin: String, environment: [String: String], timeout: TimeInterval, executable program: URL? = nil
    ) throws -> Output {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokenguard-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("stdin")
        let output = directory.appendingPathComponent("stdout")
        let errors = directory.appendingPathComponent("stderr")
        try stdin.write(to: input, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
        let process = Process()
        process.executableURL = try program ?? executable()
        process.arguments = arguments
        // Relative defaults (key archive, revocation store) land in this run's own directory.
        process.currentDirectoryURL = directory
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "TOKENGUARD_CONFIG")
        for (key, value) in environment { env[key] = value }
        BinaryRunner.applyChildSanitizerOptions(&env)
        process.environment = env
        process.standardInput = try FileHandle(forReadingFrom: input)
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errors)
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline {
                process.terminate()
                throw RunnerError("tokenguard \(arguments.first ?? "") did not finish within \(timeout) s")
            }
            usleep(10_000)
        }
        return Output(
            status: process.terminationStatus, stdout: try String(contentsOf: output, encoding: .utf8),
            stderr: try String(contentsOf: errors, encoding: .utf8))
    }
}

package struct RunnerError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// A temporary folder with a config and pinned JWKS files, removed when the value is dropped by the test.
package final class TempWorkspace: @unchecked Sendable {
    // @unchecked Sendable: only the immutable URL is shared; tests use a workspace from one task.
    package let url: URL

    package init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("tokenguard-ws-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    @discardableResult
    package func write(_ name: String, _ text: String) throws -> String {
        let path = url.appendingPathComponent(name).path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}

extension Process {
    /// Waits for the process to exit on a thread of its own, never blocking one of Swift's cooperative threads.
    package func exited() async {
        await onOwnThread { self.waitUntilExit() }
    }

    /// Runs the process to its end and returns what it wrote to standard output (standard error is dropped). For
    /// tools whose output is small (redis-cli, wrk's report): read before waiting, so a full pipe never blocks them.
    package func outputAfterRunning() throws -> String {
        let output = Pipe()
        standardOutput = output
        standardError = FileHandle.nullDevice
        try run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}
