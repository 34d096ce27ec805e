import Foundation
import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// `tokenguard batch` as a stream filter: answers come while the producer is still writing, and an output or input
/// that fails is an error with exit status 2, never a crash. One at a time: each holds a coprocess whose input's end
/// and output's reader are what it tests, and a child started alongside could hold either open by inheriting it.
@Suite(.serialized)
struct BatchStreamTests {
    let now = Verifiers.now
    let nonce = "stream-raw-nonce"

    func workspace() throws -> (TempWorkspace, String, TestKey) {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let config = try workspace.write(
            "tokenguard.yaml", "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n")
        return (workspace, config, key)
    }

    /// Reads one line from `fd`, waiting at most `seconds`; nil when none came.
    func readLine(_ fd: Int32, buffered: inout [UInt8], seconds: Double) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            if let newline = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                defer { buffered.removeSubrange(...newline) }
                return String(decoding: buffered[..<newline], as: UTF8.self)
            }
            let left = Int32(deadline.timeIntervalSinceNow * 1000)
            guard left > 0 else { return nil }
            var wanted = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&wanted, 1, left) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { return nil }
            buffered += chunk[..<count]
        }
    }

    /// `tokenguard batch -`, its streams not set yet.
    func streamingProcess(config: String) throws -> Process {
        let process = Process()
        process.executableURL = try BinaryRunner.executable()
        process.arguments = ["batch", "--config", config, "--at", String(now), "-"]
        var environment = ProcessInfo.processInfo.environment
        BinaryRunner.applyChildSanitizerOptions(&environment)
        process.environment = environment
        // Relative defaults (the revocations file) land beside the config, never in a directory other tests share.
        process.currentDirectoryURL = URL(fileURLWithPath: config).deletingLastPathComponent()
        return process
    }

    /// `tokenguard batch -` as a coprocess: pipes on its standard input and output, standard error to `errors` (a
    /// file: a pipe nobody reads while it runs could fill and stall it).
    func startStreaming(config: String, errors: String) throws -> (Process, input: Pipe, output: Pipe) {
        let process = try streamingProcess(config: config)
        let (input, output) = (Pipe(), Pipe())
        // This process's ends are close-on-exec: a child another test starts meanwhile must not inherit them, or it
        // would hold the input open (no end of input) or the output read (no reader gone) for as long as it runs.
        for end in [input.fileHandleForWriting.fileDescriptor, output.fileHandleForReading.fileDescriptor] { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        process.standardInput = input
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try process.run()
        return (process, input, output)
    }

    /// A named pipe's run: `tokenguard batch -` writing to a FIFO whose first reader opened it before the run (non-
    /// blocking, so the run's open for writing does not wait; close-on-exec, so the run never holds a reader of its
    /// own output), its input a pipe, and a line that verifies.
    struct NamedPipeRun {
        let workspace: TempWorkspace
        let process: Process
        let input: Pipe
        let fifo: String
        let errors: String
        let line: Data

        func openReader() -> Int32 { open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }
    }

    func startStreamingToNamedPipe(firstReader: inout Int32) throws -> NamedPipeRun {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let errors = try workspace.write("stderr", "")
        let fifo = workspace.url.appendingPathComponent("answers.fifo").path
        #expect(mkfifo(fifo, 0o600) == 0)
        firstReader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        #expect(firstReader >= 0)
        let process = try streamingProcess(config: config)
        let input = Pipe()
        _ = fcntl(input.fileHandleForWriting.fileDescriptor, F_SETFD, FD_CLOEXEC)
        let output = try #require(FileHandle(forWritingAtPath: fifo))
        process.standardInput = input
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try process.run()
        try output.close()
        let line = Data("{\"id\":1,\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}\n".utf8)
        return NamedPipeRun(workspace: workspace, process: process, input: input, fifo: fifo, errors: errors, line: line)
    }

    /// Waits up to 20 s for `process` to exit. Bounded: a run still going then is killed and `failure` recorded, so a
    /// regression fails the test rather than hanging the suite on a run that never ends.
    func exits(_ process: Process, else failure: String) async throws -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        guard !process.isRunning else {
            Issue.record(Comment(rawValue: failure))
            kill(process.processIdentifier, SIGKILL)
            await process.exited()
            return false
        }
        await process.exited()
        return true
    }

    @Test("a producer that waits for each answer gets it: lines are answered while standard input stays open")
    func answersWhileTheInputIsOpen() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let errors = try workspace.write("stderr", "")
        let (process, input, output) = try startStreaming(config: config, errors: errors)
        defer { if process.isRunning { process.terminate() } }
        let fd = output.fileHandleForReading.fileDescriptor
        var buffered: [UInt8] = []
        // One line at a time, each answered before the next is written: a run that held answers until a chunk
        // filled, or until the next chunk was read, would time out here.
        for (index, nonceSent) in [nonce, "wrong", nonce].enumerated() {
            let line = "{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonceSent)\"}\n"
            input.fileHandleForWriting.write(Data(line.utf8))
            let answer = try #require(readLine(fd, buffered: &buffered, seconds: 20), "no answer to line \(index) while the input is open")
            let verdict = try JSONParser.parseObject(Array(answer.utf8))
            #expect(verdict["id"] == .integer(Int64(index)))
            #expect(verdict["valid"] == .bool(nonceSent == nonce), "\(answer)")
        }
        try input.fileHandleForWriting.close()
        #expect(readLine(fd, buffered: &buffered, seconds: 20) == nil, "no more answers than lines")
        await process.exited()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)
        let summary = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(summary.contains("3 lines, 2 valid"), "\(summary)")
    }

    @Test("an output whose reader has gone ends the run at once (exit 2), though the input stays open and idle")
    func vanishedReaderWhileTheInputIsIdle() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let errors = try workspace.write("stderr", "")
        let (process, input, output) = try startStreaming(config: config, errors: errors)
        defer { if process.isRunning { process.terminate() } }
        let line = Data("{\"id\":1,\"provider\":\"apple\",\"token\":\"\(token)\"}\n".utf8)
        input.fileHandleForWriting.write(line)
        var buffered: [UInt8] = []
        _ = try #require(readLine(output.fileHandleForReading.fileDescriptor, buffered: &buffered, seconds: 20), "the first answer")
        try output.fileHandleForReading.close()
        // This answer's write fails; no line follows, and standard input stays open. Red team: the run waited for the
        // next input line before it noticed, so an idle producer kept a batch with nowhere to answer alive for hours.
        input.fileHandleForWriting.write(line)
        guard try await exits(process, else: "still running 20 s after its output failed") else { return }
        #expect(process.terminationReason == .exit && process.terminationStatus == 2, "status \(process.terminationStatus)")
        #expect(try String(contentsOfFile: errors, encoding: .utf8).contains("write failed: Broken pipe"))
        try input.fileHandleForWriting.close()
    }

    @Test("an output whose reader leaves after the last answer ends the run (exit 2), with no answer left to write")
    func readerGoneAfterTheLastAnswer() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let errors = try workspace.write("stderr", "")
        let (process, input, output) = try startStreaming(config: config, errors: errors)
        defer { if process.isRunning { process.terminate() } }
        input.fileHandleForWriting.write(Data("{\"id\":1,\"provider\":\"apple\",\"token\":\"\(token)\"}\n".utf8))
        var buffered: [UInt8] = []
        _ = try #require(readLine(output.fileHandleForReading.fileDescriptor, buffered: &buffered, seconds: 20), "the answer")
        // Every answer is out and nothing is left to write; the reader goes (`| head -1`), standard input stays open
        // and idle (`tail -F`). Red team 22: the run lived on until the next input line.
        try output.fileHandleForReading.close()
        guard try await exits(process, else: "still running 20 s after its reader left") else { return }
        #expect(process.terminationReason == .exit && process.terminationStatus == 2, "status \(process.terminationStatus)")
        #expect(try String(contentsOfFile: errors, encoding: .utf8).contains("write failed: Broken pipe"))
        try input.fileHandleForWriting.close()
    }

    @Test("a reader that leaves after every answer, just before the input ends, costs no exit status (exit 0)")
    func readerGoneJustBeforeTheInputEnds() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let errors = try workspace.write("stderr", "")
        let (process, input, output) = try startStreaming(config: config, errors: errors)
        defer { if process.isRunning { process.terminate() } }
        input.fileHandleForWriting.write(Data("{\"id\":1,\"provider\":\"apple\",\"token\":\"\(token)\"}\n".utf8))
        var buffered: [UInt8] = []
        _ = try #require(readLine(output.fileHandleForReading.fileDescriptor, buffered: &buffered, seconds: 20), "the answer")
        // `batch file | head -n 1`: the reader has every answer and exits; the input ends a moment later. Red team 24:
        // the reader's exit, seen first, failed the run with "Broken pipe" though every answer was delivered.
        try output.fileHandleForReading.close()
        try await Task.sleep(for: .milliseconds(100))
        try input.fileHandleForWriting.close()
        guard try await exits(process, else: "still running 20 s after its input ended") else { return }
        let stderr = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "status \(process.terminationStatus): \(stderr)")
        #expect(stderr.contains("tokenguard batch: 1 lines"), "\(stderr)")
    }

    /// The user and system CPU time `pid` has used so far (`/proc/PID/stat`), nil when it cannot be read.
    func cpuSeconds(_ pid: Int32) -> Double? {
        // Read to its end: /proc files report a size of 0, which a whole-file reader may take at its word.
        guard let handle = FileHandle(forReadingAtPath: "/proc/\(pid)/stat") else { return nil }
        defer { try? handle.close() }
        let stat = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        guard let end = stat.lastIndex(of: ")") else { return nil }
        // After the command's name: state is field 3, utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    @Test("a named pipe whose readers leave and others open it within 5 s carries on to the last reader (exit 0), without spinning")
    func namedPipeGetsANewReader() async throws {
        var reader: Int32 = -1
        let run = try startStreamingToNamedPipe(firstReader: &reader)
        let (process, input, errors, line) = (run.process, run.input, run.errors, run.line)
        func openReader() -> Int32 { run.openReader() }
        defer {
            if process.isRunning { process.terminate() }
            close(reader)
        }
        var buffered: [UInt8] = []
        input.fileHandleForWriting.write(line)
        _ = try #require(readLine(reader, buffered: &buffered, seconds: 20), "the first answer")
        // The reader goes with nothing left to write, a new one opens the pipe within the grace period, and the input
        // stays open past it. Red team 25: the run ended with "Broken pipe" 5 s after the first reader left.
        close(reader)
        try await Task.sleep(for: .milliseconds(100))
        // Red team 26: while the reader was away the watch spun a core (POLLERR stays set).
        let away = try #require(cpuSeconds(process.processIdentifier), "the run's CPU time")
        try await Task.sleep(for: .milliseconds(1000))
        let spent = try #require(cpuSeconds(process.processIdentifier), "the run's CPU time") - away
        #expect(spent < 0.4, "\(spent) s of CPU in 1 s with the reader away and the input idle")
        reader = openReader()
        #expect(reader >= 0)
        // The second reader leaves too, and a third comes 1.5 s later: 5.5 s after the first left, which gives the run
        // no reason to end. Red team 26: the first departure's grace period, ending while the second reader was
        // away, ended the run.
        try await Task.sleep(for: .milliseconds(2900))
        close(reader)
        try await Task.sleep(for: .milliseconds(1500))
        reader = openReader()
        #expect(reader >= 0)
        // Past the 5 s a run gives its input to end once its reader has gone (the README), counted from either leaving.
        try await Task.sleep(for: .milliseconds(5500))
        #expect(process.isRunning, "the run ended though its output has a reader: \((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")")
        input.fileHandleForWriting.write(line)
        buffered = []
        let answer = readLine(reader, buffered: &buffered, seconds: 20)
        #expect(answer?.contains("\"valid\":true") == true, "\(answer ?? "no answer on the new reader")")
        try input.fileHandleForWriting.close()
        guard try await exits(process, else: "still running 20 s after its input ended") else { return }
        let stderr = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "status \(process.terminationStatus): \(stderr)")
        #expect(stderr.contains("tokenguard batch: 2 lines, 2 valid"), "\(stderr)")
    }

    @Test("a named pipe's reader that comes, takes an answer and leaves between two looks still ends an idle run (exit 2)")
    func namedPipeVisitedBriefly() async throws {
        var reader: Int32 = -1
        let run = try startStreamingToNamedPipe(firstReader: &reader)
        let (process, input, errors, line) = (run.process, run.input, run.errors, run.line)
        func openReader() -> Int32 { run.openReader() }
        defer { if process.isRunning { process.terminate() } }
        var buffered: [UInt8] = []
        input.fileHandleForWriting.write(line)
        _ = try #require(readLine(reader, buffered: &buffered, seconds: 20), "the first answer")
        close(reader)
        // The watch has seen the reader leave; a second one opens, gets its answer and is gone again within a few
        // milliseconds, between two of the watch's looks. Red team 27: that answer's write cleared the departure and
        // the watch, seeing the reader still away, said nothing more, so the run waited on its idle input forever.
        try await Task.sleep(for: .milliseconds(450))
        reader = openReader()
        #expect(reader >= 0)
        input.fileHandleForWriting.write(line)
        buffered = []
        _ = try #require(readLine(reader, buffered: &buffered, seconds: 20), "the second answer")
        close(reader)
        guard try await exits(process, else: "still running 20 s after its last reader left, the input idle") else { return }
        let stderr = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(process.terminationReason == .exit && process.terminationStatus == 2, "status \(process.terminationStatus): \(stderr)")
        #expect(stderr.contains("write failed: Broken pipe"), "\(stderr)")
        try input.fileHandleForWriting.close()
    }

    /// Runs `tokenguard ARGS` through the shell with `redirect` applied (`>&-`: standard output closed).
    func runRedirected(_ arguments: [String], redirect: String) async throws -> (exited: Bool, status: Int32, stderr: String) {
        let workspace = try TempWorkspace()
        let errors = try workspace.write("stderr", "")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        // The shell's own standard error is the file; the redirect applies to tokenguard alone.
        process.arguments = ["-c", "exec \"$0\" \"$@\" \(redirect)", try BinaryRunner.executable().path] + arguments
        var environment = ProcessInfo.processInfo.environment
        BinaryRunner.applyChildSanitizerOptions(&environment)
        process.environment = environment
        process.currentDirectoryURL = workspace.url
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try process.run()
        await process.exited()
        return (process.terminationReason == .exit, process.terminationStatus, try String(contentsOfFile: errors, encoding: .utf8))
    }

    @Test("a closed or full standard output is an error (exit 2), not a crash; a closed standard error is no crash either")
    func closedStreams() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let log = try workspace.write("log.ndjson", "{\"id\":1,\"provider\":\"apple\",\"token\":\"\(token)\"}\n")
        let closedOutput = try await runRedirected(["batch", "--config", config, "--at", String(now), log], redirect: ">&-")
        #expect(closedOutput.exited && closedOutput.status == 2, "status \(closedOutput.status): \(closedOutput.stderr)")
        #expect(closedOutput.stderr.contains("standard output is closed"), "\(closedOutput.stderr)")
        let fullOutput = try await runRedirected(["batch", "--config", config, "--at", String(now), log], redirect: ">/dev/full")
        #expect(fullOutput.exited && fullOutput.status == 2, "status \(fullOutput.status): \(fullOutput.stderr)")
        #expect(fullOutput.stderr.contains("write failed: No space left on device"), "\(fullOutput.stderr)")
        // One-shot commands too: an answer to a closed standard output is refused, not thrown away; `revoke` refuses
        // before it changes the store.
        let mint = try await runRedirected(
            ["mint", "--provider", "apple", "--state-dir", workspace.url.appendingPathComponent("idp").path], redirect: ">&-")
        #expect(mint.exited && mint.status == 2 && mint.stderr.contains("standard output is closed"), "\(mint.status): \(mint.stderr)")
        let verify = try await runRedirected(
            ["verify", "--config", config, "--at", String(now), "--provider", "apple", "--token", token, "--nonce", nonce], redirect: ">&-")
        #expect(verify.exited && verify.status == 2 && verify.stderr.contains("standard output is closed"), "\(verify.status): \(verify.stderr)")
        // Help and the version are answers too: checked, and the right text when they can be written.
        for arguments in [["--version"], ["--help"], ["serve", "--help"]] {
            let lost = try await runRedirected(arguments, redirect: ">/dev/full")
            #expect(lost.exited && lost.status == 2 && lost.stderr.contains("write failed"), "\(arguments) \(lost.status): \(lost.stderr)")
            let answer = try workspace.write("answer", "")
            let written = try await runRedirected(arguments, redirect: ">\(answer)")
            #expect(written.exited && written.status == 0, "\(arguments) \(written.status): \(written.stderr)")
            let text = try String(contentsOfFile: answer, encoding: .utf8)
            let expected = arguments == ["--version"] ? "0." : arguments.count == 2 ? "USAGE: tokenguard serve" : "SUBCOMMANDS"
            #expect(text.contains(expected), "\(arguments): \(text.prefix(300))")
        }
        // Every message goes to standard error; with it closed, a usage error still exits 2.
        let closedErrors = try await runRedirected(
            ["verify", "--config", "/nonexistent/tokenguard.yaml", "--provider", "apple", "--token", "a.b.c"], redirect: "2>&-")
        #expect(closedErrors.exited && closedErrors.status == 2, "status \(closedErrors.status)")
    }

    @Test("an input that cannot be read is an error (exit 2) after the lines read before it are answered")
    func unreadableInput() async throws {
        let (workspace, config, _) = try workspace()
        let run = try await BinaryRunner.run(["batch", "--config", config, workspace.url.path])
        #expect(run.status == 2)
        #expect(run.stderr.contains("read failed"), "\(run.stderr)")
    }

    @Test("a non-blocking standard input is waited on, not an error: lines written after a pause are answered")
    func nonBlockingInput() async throws {
        let (workspace, config, _) = try workspace()
        let errors = try workspace.write("stderr", "")
        let output = try workspace.write("stdout", "")
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        // No child another test spawns may keep the write end open (its end of input would never come).
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
        let process = Process()
        process.executableURL = try BinaryRunner.executable()
        process.arguments = ["batch", "--config", config, "-"]
        var environment = ProcessInfo.processInfo.environment
        BinaryRunner.applyChildSanitizerOptions(&environment)
        process.environment = environment
        process.currentDirectoryURL = workspace.url
        process.standardInput = FileHandle(fileDescriptor: ends[0], closeOnDealloc: false)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try process.run()
        close(ends[0])
        let lines = (0..<1500).map { "{\"id\":\($0),\"provider\":\"apple\",\"token\":\"a.b.c\"}\n" }.joined()
        let first = Array(lines.utf8.prefix(40_000))
        let rest = Array(lines.utf8.dropFirst(40_000))
        _ = first.withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
        try await Task.sleep(for: .milliseconds(300))
        var offset = 0
        while offset < rest.count {
            let written = rest[offset...].withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
            try #require(written > 0)
            offset += written
        }
        close(ends[1])
        await process.exited()
        let stderr = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(stderr)")
        let verdicts = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n")
        #expect(verdicts.count == 1500)
        #expect(stderr.contains("1500 lines"), "\(stderr)")
    }

    @Test("a producer that never pauses still gets answers: a chunk is cut once its first line has waited 50 ms")
    func steadyProducer() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let (process, input, output) = try startStreaming(config: config, errors: try workspace.write("stderr", ""))
        defer { if process.isRunning { process.terminate() } }
        let fd = output.fileHandleForReading.fileDescriptor
        // One line answered first, so that the process is up and reading (a sanitized build can take longer to start
        // than the stream below lasts, and would then find it all in the pipe at once).
        var buffered: [UInt8] = []
        input.fileHandleForWriting.write(Data("{\"id\":-1,\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}\n".utf8))
        #expect(readLine(fd, buffered: &buffered, seconds: 60) != nil, "the first line was never answered")
        // Then a line every 2 ms (never a 10 ms pause) for at most 800 lines: a run that cut chunks only on a pause
        // would answer nothing before the chunk filled at 1,024 lines.
        var firstAnswerAfter: Int?
        for index in 0..<800 {
            let line = "{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}\n"
            input.fileHandleForWriting.write(Data(line.utf8))
            if readLine(fd, buffered: &buffered, seconds: 0.002) != nil {
                firstAnswerAfter = index
                break
            }
        }
        #expect(firstAnswerAfter != nil, "no answer while 800 lines arrived steadily")
        try input.fileHandleForWriting.close()
        // Read the rest: a slow run (sanitizers) may owe more answers than the pipe holds, and would wait on us.
        var rest = 0
        while rest <= 800, readLine(fd, buffered: &buffered, seconds: 60) != nil { rest += 1 }
        await process.exited()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)
    }

    @Test(
        "a pipe whose reader has gone is a write error, not SIGPIPE: an answer that cannot be written is exit 2, a diagnostic that cannot is dropped")
    func vanishedReaders() async throws {
        let (workspace, config, key) = try workspace()
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let log = try workspace.write("log.ndjson", "{\"id\":1,\"provider\":\"apple\",\"token\":\"\(token)\"}\n")
        let errors = try workspace.write("stderr", "")
        func run(_ arguments: [String], closedPipeOn stream: Int32) async throws -> Process {
            var ends: [Int32] = [0, 0]
            try #require(pipe(&ends) == 0)
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            close(ends[0])  // the reader is gone before the first write
            defer { close(ends[1]) }
            let process = Process()
            process.executableURL = try BinaryRunner.executable()
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            BinaryRunner.applyChildSanitizerOptions(&environment)
            process.environment = environment
            process.currentDirectoryURL = workspace.url
            let dead = FileHandle(fileDescriptor: ends[1], closeOnDealloc: false)
            process.standardOutput = stream == STDOUT_FILENO ? dead : FileHandle.nullDevice
            process.standardError = stream == STDERR_FILENO ? dead : try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
            try process.run()
            await process.exited()
            return process
        }
        let batch = try await run(["batch", "--config", config, "--at", String(now), log], closedPipeOn: STDOUT_FILENO)
        #expect(batch.terminationReason == .exit && batch.terminationStatus == 2, "status \(batch.terminationStatus)")
        #expect(try String(contentsOfFile: errors, encoding: .utf8).contains("write failed: Broken pipe"))
        // A one-shot command's answer is no more lost silently than batch's: exit 2, saying why.
        let verify = try await run(
            ["verify", "--config", config, "--at", String(now), "--provider", "apple", "--token", token], closedPipeOn: STDOUT_FILENO)
        #expect(verify.terminationReason == .exit && verify.terminationStatus == 2, "status \(verify.terminationStatus)")
        #expect(try String(contentsOfFile: errors, encoding: .utf8).contains("write failed: Broken pipe"))
        let inspect = try await run(["inspect", token], closedPipeOn: STDOUT_FILENO)
        #expect(inspect.terminationReason == .exit && inspect.terminationStatus == 2, "status \(inspect.terminationStatus)")
        let usage = try await run(
            ["verify", "--config", "/nonexistent/tokenguard.yaml", "--provider", "apple", "--token", "a.b.c"], closedPipeOn: STDERR_FILENO)
        #expect(usage.terminationReason == .exit && usage.terminationStatus == 2, "status \(usage.terminationStatus)")
        let answered = try await run(["batch", "--config", config, "--at", String(now), log], closedPipeOn: STDERR_FILENO)
        #expect(answered.terminationReason == .exit && answered.terminationStatus == 0, "the summary's failed write keeps exit 0")
    }
}
