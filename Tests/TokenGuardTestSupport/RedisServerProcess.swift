import Foundation

/// A real `redis-server` (Debian's package) on a loopback port of its own, no persistence, stopped by its pid.
package final class RedisServerProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is replaced only by start/stop from the owning test.
    package let port: Int
    /// More `redis-server` arguments (ACL users, replication, `--sentinel`).
    package let extraArguments: [String]
    /// The server's own working directory: Redis loads `dump.rdb` from there at start and a replica writes one, so
    /// servers sharing a directory would load each other's data.
    private let directory: URL
    private var process: Process?

    package var url: String { "redis://127.0.0.1:\(port)" }

    /// Sends a signal to the server (SIGSTOP and SIGCONT pause and resume it, as a slow fork or a VM pause would).
    package func signal(_ number: Int32) {
        if let process, process.isRunning { kill(process.processIdentifier, number) }
    }

    package init(port: Int? = nil, extraArguments: [String] = []) throws {
        self.port = try port ?? FreeLoopbackPort.pick()
        self.extraArguments = extraArguments
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokenguard-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try start()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Starts (or restarts) the server on the same port and waits until it accepts connections (bounded).
    package func start() throws {
        let candidates = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        guard let path = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw RunnerError("redis-server not found: install Debian's redis-server (scripts/install-deps.sh does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments =
            [
                "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                "--dir", directory.path,
            ] + extraArguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if Self.accepts(port: port) { return }
            usleep(20_000)
        }
        throw RunnerError("redis-server did not start on port \(port)")
    }

    /// Runs Debian's `redis-cli` against this server (`authentication`: e.g. `--user`, `--pass`) and returns its output.
    package func cli(_ arguments: [String], authentication: [String] = []) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/redis-cli")
        process.arguments = ["-p", String(port), "--no-auth-warning"] + authentication + arguments
        return try process.outputAfterRunning()
    }

    /// Stops the server by its pid and waits for it to exit.
    package func stop() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
