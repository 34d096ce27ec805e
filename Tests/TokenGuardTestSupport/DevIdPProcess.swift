import Foundation
import TokenGuardFetch
import TokenGuardService

/// `tokenguard dev-idp` on a loopback port, started from a state dir and stopped by its pid.
package final class DevIdPProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is set once in init and only read after.
    package let port: Int
    private let process: Process
    /// Its output, read for a sanitizer's report once it has stopped, then removed.
    private let logPath: String

    /// Starts the dev IdP and waits (bounded: 30 s, or until it exits) until it serves its JWKS; that answer is `jwks`.
    package private(set) var jwks: HTTPResponse?

    package init(stateDir: String, port: Int) async throws {
        self.port = port
        process = Process()
        process.executableURL = try BinaryRunner.executable()
        process.arguments = ["dev-idp", "--listen", "127.0.0.1:\(port)", "--state-dir", stateDir]
        var env = ProcessInfo.processInfo.environment
        BinaryRunner.applyChildSanitizerOptions(&env)
        process.environment = env
        logPath = FileManager.default.temporaryDirectory.appendingPathComponent("tokenguard-dev-idp-\(port)-\(UUID().uuidString).log").path
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = logHandle
        process.standardError = logHandle
        try process.run()
        let client = CurlHTTPClient()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline && process.isRunning {
            jwks = try? await client.send(HTTPRequest(url: "http://127.0.0.1:\(port)/jwks"))
            if jwks?.status == 200 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        let state = process.isRunning ? "still running" : "exited with status \(process.terminationStatus)"
        stop()
        throw RunnerError("tokenguard dev-idp did not serve its JWKS on port \(port) within 30 s (\(state))")
    }

    package func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        guard FileManager.default.fileExists(atPath: logPath) else { return }
        BinaryRunner.keepSanitizerReport(logPath: logPath, child: "dev-idp-\(port)")
        try? FileManager.default.removeItem(atPath: logPath)
    }

    deinit { stop() }
}
