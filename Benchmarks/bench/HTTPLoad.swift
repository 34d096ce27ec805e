import Dispatch
import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardTestSupport

/// The real server (a child process) on 127.0.0.1 under a closed-loop load from a libcurl client of our own:
/// maximum throughput with `connections` concurrent requests, then latency percentiles at fractions of it.
/// Client and server share this machine's cores, so the figures are a floor, not a ceiling.
enum HTTPLoad {
    struct Result {
        var label: String
        var maximumPerSecond: Double
        /// (fraction of maximum, achieved per second, p50, p99, p99.9 in milliseconds)
        var latency: [(Double, Double, Double, Double, Double)]
    }

    /// One kind of request measured against a server with or without the verified-token cache.
    struct Scenario: Sendable {
        var label: String
        var cached: Bool
        var request: @Sendable (_ base: String, _ token: String, _ nonce: String) -> HTTPRequest
    }

    static let scenarios: [Scenario] = [
        Scenario(label: "GET /healthz (the HTTP floor)", cached: false) { base, _, _ in HTTPRequest(url: base + "/healthz") },
        Scenario(label: "POST /v1/verify RS256, full verification", cached: false) { base, token, nonce in verify(base, token, nonce) },
        Scenario(label: "POST /v1/verify RS256, cached token", cached: true) { base, token, nonce in verify(base, token, nonce) },
        Scenario(label: "forward-auth RS256, full verification", cached: false) { base, token, nonce in forwardAuth(base, token, nonce) },
        Scenario(label: "forward-auth RS256, cached token", cached: true) { base, token, nonce in forwardAuth(base, token, nonce) },
    ]

    static func verify(_ base: String, _ token: String, _ nonce: String) -> HTTPRequest {
        let body = Array("{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}".utf8)
        return HTTPRequest(url: base + "/v1/verify", method: .post, headers: [("Content-Type", "application/json")], body: body)
    }

    /// What nginx's auth_request sends: the original path below the provider, the bearer token and the nonce.
    static func forwardAuth(_ base: String, _ token: String, _ nonce: String) -> HTTPRequest {
        HTTPRequest(url: base + "/v1/authz/apple/api/orders?id=7", headers: [("Authorization", "Bearer \(token)"), ("X-Tokenguard-Nonce", nonce)])
    }

    /// Every scenario in turn, each against a fresh server child (cache on or off as the scenario says).
    static func run(fixture: Fixture, seconds: Double, connections: Int = 16) async throws -> [Result] {
        var results: [Result] = []
        for scenario in scenarios { results.append(try await run(scenario, fixture: fixture, seconds: seconds, connections: connections)) }
        return results
    }

    static func run(_ scenario: Scenario, fixture: Fixture, seconds: Double, connections: Int) async throws -> Result {
        let workspace = try TempWorkspace()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([fixture.key]))
        let config = try workspace.write(
            "bench.yaml",
            """
            token_cache_size: \(scenario.cached ? 10_000 : 0)
            providers:
              apple:
                audiences: ["\(ProviderTokens.appleAudience)"]
                jwks_file: "\(jwks)"
                forward_auth: { claim_headers: { x-user-id: user_id, x-email: email } }
            """)
        let port = try FreeLoopbackPort.pick()
        let child = Process()
        child.executableURL = URL(fileURLWithPath: Children.executable)
        child.arguments = ["--serve-child", config, String(port)]
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

        // Maximum throughput: every connection sends as fast as answers come back.
        let maximum = await closedLoop(client: client, request: request, connections: connections, seconds: seconds)
        var latency: [(Double, Double, Double, Double, Double)] = []
        for fraction in [0.25, 0.5, 0.9] {
            let (achieved, samples) = await paced(
                client: client, request: request, connections: connections, rate: maximum * fraction, seconds: seconds)
            let sorted = samples.sorted()
            latency.append((fraction, achieved, Measure.percentile(sorted, 0.5), Measure.percentile(sorted, 0.99), Measure.percentile(sorted, 0.999)))
        }
        return Result(label: scenario.label, maximumPerSecond: maximum, latency: latency)
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

    /// Each connection sends on a fixed schedule so that together they offer `rate` requests per second;
    /// latency is measured from the scheduled send time, so queueing delay counts (no coordinated omission).
    static func paced(client: CurlHTTPClient, request: HTTPRequest, connections: Int, rate: Double, seconds: Double) async -> (Double, [Double]) {
        let interval = Double(connections) / max(rate, 1)
        let started = DispatchTime.now().uptimeNanoseconds
        let end = started + UInt64(seconds * 1e9)
        let samples = await withTaskGroup(of: [Double].self) { group in
            for connection in 0..<connections {
                group.addTask {
                    var mine: [Double] = []
                    var next = Double(started) + interval * 1e9 * Double(connection) / Double(connections)
                    while UInt64(next) < end {
                        let now = Double(DispatchTime.now().uptimeNanoseconds)
                        if next > now { try? await Task.sleep(nanoseconds: UInt64(next - now)) }
                        if (try? await client.send(request))?.status == 200 {
                            mine.append((Double(DispatchTime.now().uptimeNanoseconds) - next) / 1e6)
                        }
                        next += interval * 1e9
                    }
                    return mine
                }
            }
            var all: [Double] = []
            for await part in group { all += part }
            return all
        }
        return (Double(samples.count) / seconds, samples)
    }
}
