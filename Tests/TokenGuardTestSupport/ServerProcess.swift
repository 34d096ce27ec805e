import Foundation
import TokenGuardCore
import TokenGuardFetch
import TokenGuardService

/// A real `tokenguard serve` process on a loopback port of its own, stopped by its pid.
package final class ServerProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is set once; tests use a server from one task at a time.
    package let port: Int
    package let process: Process
    package let logPath: String
    package var baseURL: String { "http://127.0.0.1:\(port)" }
    private let client: CurlHTTPClient

    /// Starts `tokenguard serve` with `arguments` after `serve` and waits (bounded) until `/healthz` answers.
    package init(arguments: [String], environment: [String: String] = [:], workspace: TempWorkspace) async throws {
        port = try FreeLoopbackPort.pick()
        process = Process()
        process.executableURL = try BinaryRunner.executable()
        process.arguments = ["serve", "--listen", "127.0.0.1:\(port)"] + arguments
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
            if let response = try? await client.send(HTTPRequest(url: baseURL + "/healthz")), response.status == 200 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        stop()
        throw RunnerError("tokenguard serve did not answer /healthz within 30 s: \(self.log())")
    }

    deinit { stop() }

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

    package func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    package func get(_ path: String) async throws -> HTTPResponse {
        try await client.send(HTTPRequest(url: baseURL + path))
    }

    package func post(_ path: String, _ body: String, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await client.send(
            HTTPRequest(url: baseURL + path, method: .post, headers: [("Content-Type", "application/json")] + headers, body: Array(body.utf8)))
    }

    package func get(_ path: String, headers: [(String, String)]) async throws -> HTTPResponse {
        try await client.send(HTTPRequest(url: baseURL + path, headers: headers))
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    @discardableResult
    package func terminate(timeout: TimeInterval = 20) -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    package func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

package enum FreeLoopbackPort {
    /// A port free on 127.0.0.1 now (see ``LoopbackPort``).
    package static func pick() throws -> Int { try LoopbackPort.pick() }
}
