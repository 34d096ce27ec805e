import Foundation

/// A real nginx (Debian's package) on a loopback port of its own, with a config the test writes: one process
/// (`master_process off`), in the foreground, every path inside the workspace; stopped by its pid.
package final class NginxProcess: @unchecked Sendable {
    // @unchecked Sendable: the process handle is set once; tests use one nginx from one task at a time.
    package let port: Int
    package let process: Process
    package let directory: String

    /// The nginx binary, or nil when it is not installed.
    package static var executable: String? {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// The repository's deploy/nginx directory (the snippets users include).
    package static var snippets: String { TestPaths.repositoryRoot.appendingPathComponent("deploy/nginx").path }

    /// A config for one nginx process in the foreground with every path under `directory` (its temp folders must
    /// exist), around `http` (the `http` block's contents).
    package static func standaloneConfig(directory: String, http: String, workerConnections: Int = 256) -> String {
        """
        daemon off;
        master_process off;
        worker_processes 1;
        error_log \(directory)/error.log warn;
        pid \(directory)/nginx.pid;
        events { worker_connections \(workerConnections); }
        http {
            access_log off;
            client_body_temp_path \(directory)/body;
            proxy_temp_path \(directory)/proxy;
            fastcgi_temp_path \(directory)/fastcgi;
            uwsgi_temp_path \(directory)/uwsgi;
            scgi_temp_path \(directory)/scgi;
        \(http)
        }
        """
    }

    /// Writes an nginx config around `server` (the contents of one `server` block, listening on `port`) and `http`
    /// (more `http` context: upstreams), checks it with `nginx -t`, starts nginx and waits until it accepts.
    package init(http: String, server: (Int) -> String, workspace: TempWorkspace) async throws {
        guard let nginx = Self.executable else { throw RunnerError("nginx is not installed (scripts/install-deps.sh installs it)") }
        port = try FreeLoopbackPort.pick()
        directory = workspace.url.appendingPathComponent("nginx-\(port)").path
        for sub in ["", "/body", "/proxy", "/fastcgi", "/uwsgi", "/scgi"] {
            try FileManager.default.createDirectory(atPath: directory + sub, withIntermediateDirectories: true)
        }
        let config = Self.standaloneConfig(
            directory: directory,
            http: """
                \(http)
                    server {
                        listen 127.0.0.1:\(port);
                \(server(port))
                    }
                """)
        let path = directory + "/nginx.conf"
        try config.write(toFile: path, atomically: true, encoding: .utf8)
        let check = Process()
        check.executableURL = URL(fileURLWithPath: nginx)
        check.arguments = ["-t", "-q", "-p", directory, "-c", path, "-e", directory + "/error.log"]
        let checkOutput = Pipe()
        check.standardError = checkOutput
        check.standardOutput = checkOutput
        try check.run()
        check.waitUntilExit()
        guard check.terminationStatus == 0 else {
            let text = String(decoding: checkOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw RunnerError("nginx -t refused the config: \(text)\n\(config)")
        }
        process = Process()
        process.executableURL = URL(fileURLWithPath: nginx)
        process.arguments = ["-p", directory, "-c", path, "-e", directory + "/error.log"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if !process.isRunning { throw RunnerError("nginx exited: \(errorLog())") }
            if let fd = RawHTTP.connectLoopback(port: port) {
                close(fd)
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        stop()
        throw RunnerError("nginx did not accept connections within 10 s: \(errorLog())")
    }

    deinit { stop() }

    package func errorLog() -> String { (try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? "" }

    package func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
