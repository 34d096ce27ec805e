import Dispatch
import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardTestSupport

/// The real server (a child process) on 127.0.0.1 under load, the way a backend sees it: `wrk` (Debian) as the
/// generator where it is installed — maximum throughput with 16 connections, and one connection at a time — with the
/// server and wrk pinned to different cores when there are two or more; then latency percentiles at fractions of
/// that maximum from the bench's own open-loop generator (`OpenLoop`, no coordinated omission), pinned as wrk is.
/// Without wrk the bench's libcurl client measures the maximum, and the report says so.
enum HTTPLoad {
    struct Result {
        var label: String
        /// Requests per second at 16 connections.
        var maximumPerSecond: Double
        var generator: String
        /// One connection at a time (wrk -c1): p50 and p99 in milliseconds; nil without wrk.
        var oneConnection: (p50: Double, p99: Double)?
        /// (fraction of maximum, achieved per second, p50, p99, p99.9 in milliseconds), from the open-loop client.
        var latency: [(Double, Double, Double, Double, Double)]
        /// Answers that were not 2xx under wrk (a scenario whose requests fail measures nothing).
        var failures: Int
        /// This request's rate over `GET /healthz` on the same server, measured in alternation (wrk, 1 s each): each
        /// round's ratio, in order. Empty for the floor itself, the peer server, and without wrk.
        var ratiosToFloor: [Double] = []
        /// This request's rate over the scenario's `comparedWith` request on the same server, measured in alternation
        /// as the floor is: each round's ratio, in order. Empty without a comparison or without wrk.
        var ratiosToComparison: [Double] = []
    }

    enum Server: Equatable {
        /// tokenguard, with or without the verified-token cache.
        case tokenguard(cached: Bool)
        /// The Hummingbird + jwt-kit endpoint a team would write instead (no cache).
        case jwtkit
    }

    /// One kind of request against one kind of server.
    struct Scenario: Sendable {
        var label: String
        var server: Server
        /// Another request whose rate this one's is compared with on the same server, in alternation.
        var comparedWith: (@Sendable (_ base: String, _ token: String, _ nonce: String) -> HTTPRequest)? = nil
        var request: @Sendable (_ base: String, _ token: String, _ nonce: String) -> HTTPRequest
    }

    /// Every scenario this build can run (the jwt-kit server only where the peers are built).
    static let scenarios = allScenarios.filter { Bench.peersBuilt || $0.server != .jwtkit }

    static let allScenarios: [Scenario] = [
        Scenario(label: "GET /healthz (the HTTP floor)", server: .tokenguard(cached: false)) { base, _, _ in HTTPRequest(url: base + "/healthz") },
        Scenario(label: "POST /v1/verify RS256, full verification", server: .tokenguard(cached: false)) { base, token, nonce in
            verify(base, token, nonce)
        },
        Scenario(label: "POST /v1/verify RS256, cached token", server: .tokenguard(cached: true)) { base, token, nonce in verify(base, token, nonce)
        },
        // Compared with POST /v1/verify on the same server: the same verification, without a JSON body or verdict. Each
        // over the floor on its own server, a minute apart, swung by a third between runs (0.78 to 1.00).
        Scenario(label: "forward-auth RS256, full verification", server: .tokenguard(cached: false), comparedWith: verify) { base, token, nonce in
            forwardAuth(base, token, nonce)
        },
        Scenario(label: "forward-auth RS256, cached token", server: .tokenguard(cached: true)) { base, token, nonce in forwardAuth(base, token, nonce)
        },
        Scenario(label: "Hummingbird + jwt-kit server, POST /v1/verify RS256", server: .jwtkit) { base, token, nonce in verify(base, token, nonce) },
    ]

    static func verify(_ base: String, _ token: String, _ nonce: String) -> HTTPRequest {
        let body = Array("{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}".utf8)
        return HTTPRequest(url: base + "/v1/verify", method: .post, headers: [("Content-Type", "application/json")], body: body)
    }

    /// What nginx's auth_request sends: the bearer token and the nonce.
    static func forwardAuth(_ base: String, _ token: String, _ nonce: String) -> HTTPRequest {
        HTTPRequest(url: base + "/v1/authz/apple", headers: [("Authorization", "Bearer \(token)"), ("X-Tokenguard-Nonce", nonce)])
    }

    /// Alternations of /healthz and the scenario's request for its ratio to the floor (the median is reported).
    static let floorRounds = 5

    static var wrk: String? { ["/usr/bin/wrk", "/usr/local/bin/wrk"].first { FileManager.default.isExecutableFile(atPath: $0) } }
    /// Pinning needs taskset and two cores: the server gets core 0, the generator core 1.
    static var taskset: String? {
        guard ProcessInfo.processInfo.activeProcessorCount >= 2 else { return nil }
        return CPUPinning.taskset
    }

    /// A process for `executable`, pinned to `core` (0 for servers, 1 for generators) when pinning is possible.
    static func pinned(_ executable: String, _ arguments: [String], core: Int) -> Process {
        let process = Process()
        if let taskset {
            process.executableURL = URL(fileURLWithPath: taskset)
            process.arguments = ["-c", String(core), executable] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        }
        return process
    }

    /// Every scenario in turn, each against a fresh server child.
    static func run(fixture: Fixture, seconds: Double, connections: Int = 16) async throws -> [Result] {
        var results: [Result] = []
        for scenario in scenarios { results.append(try await run(scenario, fixture: fixture, seconds: seconds, connections: connections)) }
        return results
    }

    static func run(_ scenario: Scenario, fixture: Fixture, seconds: Double, connections: Int) async throws -> Result {
        let workspace = try TempWorkspace()
        let port = try FreeLoopbackPort.pick()
        var arguments: [String]
        switch scenario.server {
        case .tokenguard(let cached):
            let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([fixture.key]))
            let config = try workspace.write(
                "bench.yaml",
                """
                token_cache_size: \(cached ? 10_000 : 0)
                key_archive: ""
                providers:
                  apple:
                    audiences: ["\(ProviderTokens.appleAudience)"]
                    jwks_file: "\(jwks)"
                    forward_auth: { claim_headers: { x-user-id: user_id, x-email: email } }
                """)
            arguments = ["--serve-child", config, String(port)]
        case .jwtkit:
            let pem = try workspace.write("key.pem", try fixture.key.signingKey.publicKeyPEM())
            arguments = ["--jwtkit-serve-child", pem, fixture.key.keyID, "https://appleid.apple.com", ProviderTokens.appleAudience, String(port)]
        }
        let child = pinned(Children.executable, arguments, core: 0)
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()
        defer {
            if child.isRunning {
                kill(child.processIdentifier, SIGTERM)
                child.waitUntilExit()
            }
        }
        var http = CurlHTTPClient.Configuration()
        http.threads = connections
        http.totalTimeoutMilliseconds = 10_000
        let client = CurlHTTPClient(configuration: http)
        let base = "http://127.0.0.1:\(port)"
        for _ in 0..<300 {
            if (try? await client.send(HTTPRequest(url: base + "/healthz")))?.status == 200 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        // Fixture tokens are minted at a fixed time in the past; the server judges expiry at the real time, so
        // the load uses a token minted now with the same key and shape.
        let token = try fixture.key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: fixture.nonce))
        let request = scenario.request(base, token, fixture.nonce)
        guard (try? await client.send(request))?.status == 200 else { throw RunnerError("the bench server does not answer 200 to \(scenario.label)") }

        var result = Result(label: scenario.label, maximumPerSecond: 0, generator: "libcurl", oneConnection: nil, latency: [], failures: 0)
        if let wrk {
            let script = try workspace.write("request.lua", wrkScript(request))
            let many = try runWrk(wrk, url: request.url, script: script, connections: connections, seconds: seconds)
            let one = try runWrk(wrk, url: request.url, script: script, connections: 1, seconds: seconds)
            guard many.requestsPerSecond > 0, many.requestsPerSecond.isFinite else {
                throw RunnerError("wrk's report for \(scenario.label) has no request rate")
            }
            result.maximumPerSecond = many.requestsPerSecond
            result.generator = taskset == nil ? "wrk" : "wrk (server on core 0, wrk on core 1)"
            result.oneConnection = (one.p50, one.p99)
            result.failures = many.failures + one.failures
            // The ratio to the floor from runs seconds apart swings with whatever else the machine does (0.67 to 0.85
            // for one build in two runs): here each verify second is paired with a /healthz second on this server, on
            // the same cores. Forward-auth is also paired so with POST /v1/verify.
            if case .tokenguard = scenario.server, !request.url.hasSuffix("/healthz") {
                func paired(with other: HTTPRequest, file: String) throws -> [Double] {
                    let otherScript = try workspace.write(file, wrkScript(other))
                    var ratios: [Double] = []
                    // In turn first and second (ABBA): a second run of a pair that is systematically slower or faster
                    // would otherwise enter the ratio.
                    for round in 0..<Self.floorRounds {
                        func run(_ url: String, _ script: String) throws -> WrkResult {
                            try runWrk(wrk, url: url, script: script, connections: connections, seconds: 1)
                        }
                        let baseFirst = round % 2 == 0
                        let first = try baseFirst ? run(other.url, otherScript) : run(request.url, script)
                        let second = try baseFirst ? run(request.url, script) : run(other.url, otherScript)
                        let (baseline, this) = baseFirst ? (first, second) : (second, first)
                        result.failures += baseline.failures + this.failures
                        if baseline.requestsPerSecond > 0 { ratios.append(this.requestsPerSecond / baseline.requestsPerSecond) }
                    }
                    return ratios
                }
                result.ratiosToFloor = try paired(with: HTTPRequest(url: base + "/healthz"), file: "floor.lua")
                if let comparedWith = scenario.comparedWith {
                    result.ratiosToComparison = try paired(with: comparedWith(base, token, fixture.nonce), file: "compared.lua")
                }
            }
        } else {
            result.maximumPerSecond = await closedLoop(client: client, request: request, connections: connections, seconds: seconds)
        }
        // Latency at fractions of the maximum, from the open-loop generator on the generator's core.
        let requestFile = try workspace.write("request.http", String(decoding: wireBytes(request, port: port), as: UTF8.self))
        for fraction in [0.25, 0.5, 0.9] {
            let run = try openLoop(
                port: port, requestFile: requestFile, rate: result.maximumPerSecond * fraction, seconds: seconds, connections: connections)
            result.latency.append((fraction, run.achieved, run.p50, run.p99, run.p999))
            result.failures += run.failures
        }
        return result
    }

    /// `request` as HTTP/1.1 bytes on a keep-alive connection to 127.0.0.1:`port`.
    static func wireBytes(_ request: HTTPRequest, port: Int) -> [UInt8] {
        let path = String(request.url.dropFirst("http://127.0.0.1:\(port)".count))
        var head = "\(request.method.rawValue) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for (name, value) in request.headers { head += "\(name): \(value)\r\n" }
        if let body = request.body { head += "Content-Length: \(body.count)\r\n" }
        return Array((head + "\r\n").utf8) + (request.body ?? [])
    }

    /// Runs the open-loop generator (`OpenLoop`) as a child, pinned to core 1 when pinning is possible.
    static func openLoop(port: Int, requestFile: String, rate: Double, seconds: Double, connections: Int) throws -> (
        achieved: Double, failures: Int, p50: Double, p99: Double, p999: Double
    ) {
        let arguments = ["--open-loop-child", String(port), requestFile, String(rate), String(seconds), String(connections)]
        let process = pinned(Children.executable, arguments, core: 1)
        let output = Pipe()
        process.standardOutput = output
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let complaint = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard process.terminationStatus == 0, fields.count == 5, let achieved = Double(fields[0]), achieved.isFinite, let failures = Int(fields[1]),
            let p50 = Double(fields[2]), let p99 = Double(fields[3]), let p999 = Double(fields[4])
        else { throw RunnerError("the open-loop generator failed at \(rate)/s: \(complaint)") }
        return (achieved, failures, p50, p99, p999)
    }

    /// A wrk Lua script sending `request` (method, headers, body).
    static func wrkScript(_ request: HTTPRequest) -> String {
        var lines = ["wrk.method = \"\(request.method.rawValue)\""]
        for (name, value) in request.headers { lines.append("wrk.headers[\"\(name)\"] = \"\(value)\"") }
        if let body = request.body { lines.append("wrk.body = [[\(String(decoding: body, as: UTF8.self))]]") }
        return lines.joined(separator: "\n") + "\n"
    }

    struct WrkResult {
        var requestsPerSecond: Double
        var p50: Double
        var p99: Double
        var failures: Int
    }

    /// Runs wrk (pinned to core 1 when pinning is possible) and reads its report.
    static func runWrk(_ wrk: String, url: String, script: String, connections: Int, seconds: Double) throws -> WrkResult {
        let duration = "\(max(1, Int(seconds.rounded())))s"
        let text = try pinned(wrk, ["-t1", "-c\(connections)", "-d\(duration)", "--latency", "-s", script, url], core: 1).outputAfterRunning()
        func milliseconds(_ percentile: String) -> Double {
            guard let line = text.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(percentile + " ") }),
                let value = line.split(separator: " ", omittingEmptySubsequences: true).last
            else { return .nan }
            let number = Double(value.prefix { $0.isNumber || $0 == "." }) ?? .nan
            if value.hasSuffix("us") { return number / 1000 }
            if value.hasSuffix("ms") { return number }
            if value.hasSuffix("s") { return number * 1000 }
            return .nan
        }
        let rate = text.split(separator: "\n").first { $0.hasPrefix("Requests/sec:") }.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        let failures =
            text.split(separator: "\n").first { $0.contains("Non-2xx or 3xx responses:") }.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
        return WrkResult(requestsPerSecond: rate, p50: milliseconds("50%"), p99: milliseconds("99%"), failures: failures)
    }

    static func closedLoop(client: CurlHTTPClient, request: HTTPRequest, connections: Int, seconds: Double) async -> Double {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
        let started = DispatchTime.now().uptimeNanoseconds
        let total = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<connections {
                group.addTask {
                    var ok = 0
                    while DispatchTime.now().uptimeNanoseconds < deadline {
                        if (try? await client.send(request))?.status == 200 { ok += 1 }
                    }
                    return ok
                }
            }
            var sum = 0
            for await count in group { sum += count }
            return sum
        }
        return Double(total) / (Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
    }
}
