import Foundation
import TokenGuardCore
import TokenGuardFetch
import TokenGuardService

/// A real `tokenguard serve` process on a loopback port of its own, stopped by its pid.
public final class ServerProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is set once; tests use a server from one task at a time.
    public let port: Int
    public let process: Process
    public let logPath: String
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    private let client: CurlHTTPClient

    /// Starts `tokenguard serve` with `arguments` after `serve` and waits (bounded) until `/healthz` answers.
    public init(arguments: [String], environment: [String: String] = [:], workspace: TempWorkspace) async throws {
        port = try FreeLoopbackPort.pick()
        process = Process()
        process.executableURL = try BinaryRunner.executable()
        process.arguments = ["serve", "--listen", "127.0.0.1:\(port)"] + arguments
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

    public func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    public func get(_ path: String) async throws -> HTTPResponse {
        try await client.send(HTTPRequest(url: baseURL + path))
    }

    public func post(_ path: String, _ body: String, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await client.send(
            HTTPRequest(url: baseURL + path, method: .post, headers: [("Content-Type", "application/json")] + headers, body: Array(body.utf8)))
    }

    public func get(_ path: String, headers: [(String, String)]) async throws -> HTTPResponse {
        try await client.send(HTTPRequest(url: baseURL + path, headers: headers))
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    @discardableResult
    public func terminate(timeout: TimeInterval = 20) -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

public enum FreeLoopbackPort {
    /// A port free on 127.0.0.1 now (see ``LoopbackPort``).
    public static func pick() throws -> Int { try LoopbackPort.pick() }
}
