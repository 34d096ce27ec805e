import Foundation
import TokenGuardCore
import TokenGuardFetch
import TokenGuardService
import TokenGuardSync

/// A real `tokenguard serve` process on a loopback port of its own, stopped by its pid.
package final class ServerProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is set once; tests use a server from one task at a time.
    package let port: Int
    package let process: Process
    package let logPath: String
    package var baseURL: String { "http://127.0.0.1:\(port)" }
    private let client: CurlHTTPClient
    /// Whether the stopped server's log was looked at for a sanitizer's report (once).
    private var logChecked = false

    /// Starts `tokenguard serve` with `arguments` after `serve` and waits (bounded) until `/healthz` answers; with
    /// `cpus` (a `taskset` list such as "0"), the process may run only on those CPUs.
    package init(arguments: [String], environment: [String: String] = [:], cpus: String? = nil, workspace: TempWorkspace) async throws {
        port = try FreeLoopbackPort.pick()
        process = Process()
        let serve = ["serve", "--listen", "127.0.0.1:\(port)"] + arguments
        if let cpus {
            guard let taskset = CPUPinning.taskset else {
                throw RunnerError("taskset (util-linux) is needed to pin a server")
            }
            process.executableURL = URL(fileURLWithPath: taskset)
            process.arguments = ["-c", cpus, try BinaryRunner.executable().path] + serve
        } else {
            process.executableURL = try BinaryRunner.executable()
            process.arguments = serve
        }
        // Relative defaults (the key archive, the revocation store beside it) land in the test's own workspace,
        // never in a file another test or an earlier run shares.
        process.currentDirectoryURL = workspace.url
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "TOKENGUARD_CONFIG")
        for (key, value) in environment { env[key] = value }
        BinaryRunner.applyChildSanitizerOptions(&env)
        process.environment = env
        logPath = workspace.url.appendingPathComponent("server-\(port).log").path
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = logHandle
        process.standardError = logHandle
        var http = CurlHTTPClient.Configuration()
        http.totalTimeoutMilliseconds = 15_000
        http.connectTimeoutMilliseconds = 500
        http.threads = 8
        client = CurlHTTPClient(configuration: http)
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if !process.isRunning { throw RunnerError("tokenguard serve exited: \(self.log())") }
            // The answer must come from this process, not another test's server on a reused port: the listening
            // socket must be one of its descriptors. (Its log cannot say so: a quiet log level hides the line.)
            if Self.listens(pid: process.processIdentifier, onLoopbackPort: port),
                let response = try? await client.send(HTTPRequest(url: baseURL + "/healthz")), response.status == 200
            {
                await waitForRevocations(seconds: 10)
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        stop()
        throw RunnerError("tokenguard serve did not answer /healthz within 30 s: \(self.log())")
    }

    deinit { stop() }

    /// Whether process `pid` holds the socket listening on 127.0.0.1:`port` (Linux: `/proc/net/tcp` names the socket's
    /// inode, `/proc/PID/fd` the process's sockets).
    static func listens(pid: Int32, onLoopbackPort port: Int) -> Bool {
        // Read to the end: /proc files report size 0, and a read sized by that stops at the first page.
        guard let handle = FileHandle(forReadingAtPath: "/proc/net/tcp"), let data = try? handle.readToEnd() else { return false }
        try? handle.close()
        let table = String(decoding: data, as: UTF8.self)
        let local = "0100007F:" + String(format: "%04X", port)
        var inodes: Set<String> = []
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            guard fields.count > 9, fields[1] == local, fields[3] == "0A" else { continue }
            inodes.insert("socket:[\(fields[9])]")
        }
        guard !inodes.isEmpty, let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else {
            return false
        }
        return descriptors.contains { name in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(name)")).map(inodes.contains) ?? false
        }
    }

    /// Waits (bounded) until `/readyz` answers 200: keys loaded and, where configured, revocations read once. `/healthz`
    /// answers as soon as the server listens; the first read of the revocation store runs beside it, and until it is
    /// done every valid verdict is `revocation_store_unavailable` (fail closed), which a test must not mistake for a
    /// refusal.
    package func waitUntilReady(seconds: Double = 20) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let response = try? await client.send(HTTPRequest(url: baseURL + "/readyz")), response.status == 200 { return }
            try await Task.sleep(for: .milliseconds(25))
        }
        throw RunnerError("tokenguard serve was not ready within \(Int(seconds)) s: \(self.log())")
    }

    /// Revocations are first read after the listener opens, and until then a valid token is 503
    /// `revocation_store_unavailable`, which no test's first request expects (CI saw it). Waited for, bounded, never
    /// required: a server whose store cannot be read starts all the same, for the tests of that.
    private func waitForRevocations(seconds: Double) async {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            guard let response = try? await client.send(HTTPRequest(url: baseURL + "/readyz")),
                let body = try? JSONParser.parseObject(response.body), let revocations = body["revocations"]?.objectValue
            else { return }
            if revocations["ok"] == .bool(true) { return }
            try? await Task.sleep(for: .milliseconds(25))
        }
    }

    package func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    package func get(_ path: String) async throws -> HTTPResponse {
        try await send(HTTPRequest(url: baseURL + path))
    }

    package func post(_ path: String, _ body: String, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await send(
            HTTPRequest(url: baseURL + path, method: .post, headers: [("Content-Type", "application/json")] + headers, body: Array(body.utf8)))
    }

    package func get(_ path: String, headers: [(String, String)]) async throws -> HTTPResponse {
        try await send(HTTPRequest(url: baseURL + path, headers: headers))
    }

    /// The request's answer; a request that gets none says whether the server is still running, and its log's end (a
    /// sanitizer's report in a server goes to that log, not to the test's output).
    private func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        do {
            return try await client.send(request)
        } catch {
            try? await Task.sleep(for: .milliseconds(200))
            let state = process.isRunning ? "still running" : "exited with status \(process.terminationStatus)"
            // A sanitizer's report is given from its start (its end is only the threads' creation stacks).
            let log = log()
            let report = ["WARNING: ThreadSanitizer", "ERROR: AddressSanitizer"].lazy.compactMap { log.range(of: $0) }.first
            let excerpt = report.map { String(log[$0.lowerBound...].prefix(12_000)) } ?? String(log.suffix(3000))
            throw RunnerError("\(error) (\(request.method.rawValue) \(request.url); tokenguard serve \(state); its log: \(excerpt))")
        }
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    @discardableResult
    package func terminate(timeout: TimeInterval = 20) async -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(timeout)
        // Polled with a suspension, not usleep: a drain takes seconds, and a blocked cooperative thread stalls
        // every other test.
        while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        return process.isRunning ? nil : process.terminationStatus
    }

    package func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        if !logChecked {
            logChecked = true
            BinaryRunner.keepSanitizerReport(logPath: logPath, child: "serve-\(port)")
        }
    }
}

package enum FreeLoopbackPort {
    /// Ports handed out in this test process. A port picked and released can be picked again before the server
    /// meant for it has bound it; with tests in parallel, two servers were then given one port, and a test talked to
    /// the other test's server (CI: a caller-keys test answered 200 by a server without caller keys).
    // Locked, not Synchronization.Mutex: ThreadSanitizer cannot see the latter (README, Sanitizers), and the
    // end-to-end tests run in parallel under it.
    private static let handedOut = Locked<Set<Int>>([])

    /// A port free on 127.0.0.1 now (see ``LoopbackPort``) and never handed out before in this process.
    package static func pick() throws -> Int {
        for _ in 0..<64 {
            let port = try LoopbackPort.pick()
            if handedOut.withLock({ $0.insert(port).inserted }) { return port }
        }
        throw RunnerError("no loopback port left that this test process has not used")
    }

    /// Records a port a test bound itself (port 0, the kernel's choice); false if it was handed out before. A stopped
    /// server's port must stay unused: a test that expects a refused connection there could otherwise reach another
    /// test's IdP bound to it since (CI: `refusedThenBack` got something other than keys_unavailable).
    package static func claim(_ port: Int) -> Bool {
        handedOut.withLock { $0.insert(port).inserted }
    }
}
