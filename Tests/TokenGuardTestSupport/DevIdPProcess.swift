import Foundation
import TokenGuardFetch
import TokenGuardService

/// `tokenguard dev-idp` on a loopback port, started from a state dir and stopped by its pid.
package final class DevIdPProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is set once in init and only read after.
    package let port: Int
    private let process: Process

    /// Starts the dev IdP and waits (bounded: 10 s) until it serves its JWKS; that answer is `jwks`.
    package private(set) var jwks: HTTPResponse?

    package init(stateDir: String, port: Int) async throws {
        self.port = port
        process = Process()
        process.executableURL = try BinaryRunner.executable()
        process.arguments = ["dev-idp", "--listen", "127.0.0.1:\(port)", "--state-dir", stateDir]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let client = CurlHTTPClient()
        for _ in 0..<200 {
            jwks = try? await client.send(HTTPRequest(url: "http://127.0.0.1:\(port)/jwks"))
            if jwks?.status == 200 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    package func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }

    deinit { stop() }
}
