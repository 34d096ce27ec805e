import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// Request limits under abuse: while each kind of abuse runs against the real server, a well-behaved client
/// verifies a valid token about 50 times a second and its latency is recorded. Every one of its requests must
/// be answered correctly; its p99 is reported beside the p99 with no abuse. The abusive requests must get
/// their own clear answers (413, 400, 401, 503 on timeout, or a closed connection), never a 500 or a crash.
enum Abuse {
    static let audience = "abuse-app"
    static let issuer = "https://idp.abuse.test"

    struct Scenario: Sendable {
        let name: String
        let summary: String
        /// Starts the abuse; returns a function that stops it and returns its outcome.
        let start: @Sendable (Context) async throws -> @Sendable () async -> Outcome
    }

    struct Outcome: Sendable {
        var figures: [(String, JSONValue)] = []
        var failures: [String] = []
        var lines: [String] = []
    }

    struct Context: Sendable {
        let server: ServerProcess
        let port: Int
        let client: CurlHTTPClient
        let wellBehaved: CurlHTTPClient
        let tokens: AbuseTokens
        let seconds: Double
        let requestTimeout: Double
        let idleTimeout: Double
    }

    static func run(secondsPerScenario: Double) async throws -> StressReport {
        let seconds = max(8, secondsPerScenario)
        let requestTimeout = 5.0
        let idleTimeout = 5.0
        let tokens = try AbuseTokens.make()
        let workspace = try TempWorkspace()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([tokens.key]))
        let config = try workspace.write(
            "abuse.yaml",
            """
            token_cache_size: 0
            server: { request_timeout_seconds: \(Int(requestTimeout)), idle_timeout_seconds: \(Int(idleTimeout)) }
            providers:
              abuse: { kind: oidc, issuer: "\(issuer)", audiences: ["\(audience)"], jwks_file: "\(jwks)", algorithms: [RS256] }
              apple: { audiences: ["\(audience)"], jwks_file: "\(jwks)" }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], environment: ["TOKENGUARD_LOG_LEVEL": "error"], workspace: workspace)
        defer { server.stop() }
        var http = CurlHTTPClient.Configuration()
        http.threads = 8
        http.totalTimeoutMilliseconds = 30_000
        let client = CurlHTTPClient(configuration: http)
        // The well-behaved client has connections of its own: it must not inherit one an abusive request spoiled.
        var polite = CurlHTTPClient.Configuration()
        polite.threads = 1
        polite.totalTimeoutMilliseconds = 30_000
        let context = Context(
            server: server, port: server.port, client: client, wellBehaved: CurlHTTPClient(configuration: polite), tokens: tokens, seconds: seconds,
            requestTimeout: requestTimeout, idleTimeout: idleTimeout)
        say(
            "abuse: \(Int(seconds)) s per scenario; server request timeout \(Int(requestTimeout)) s, idle timeout \(Int(idleTimeout)) s; token cache off"
        )

        var report = StressReport()
        var scenarioFigures: [(String, JSONValue)] = []
        var baselineP99 = 0.0
        let rssBefore = residentMiB(pid: server.process.processIdentifier) ?? 0
        for scenario in scenarios {
            let stopAbuse = try await scenario.start(context)
            let (sample, wrong) = await wellBehavedClient(context, seconds: seconds)
            let outcome = await stopAbuse()
            if scenario.name == "baseline" { baselineP99 = sample.percentile(99) }
            let ratio = baselineP99 > 0 ? sample.percentile(99) / baselineP99 : 1
            let rss = residentMiB(pid: server.process.processIdentifier) ?? 0
            say(
                String(
                    format: "abuse %@: well-behaved client %@ (p99 %.1fx baseline); server RSS %.1f MiB", scenario.name, sample.summary, ratio, rss))
            for line in outcome.lines { say("  \(line)") }
            var figures: [(String, JSONValue)] = [
                ("summary", .string(scenario.summary)), ("well_behaved", sample.json),
                ("p99_vs_baseline", .number((ratio * 100).rounded() / 100)), ("server_rss_mib", .number((rss * 10).rounded() / 10)),
            ]
            figures += outcome.figures
            scenarioFigures.append((scenario.name, .object(JSONObject(figures))))
            if wrong > 0 { report.fail("\(scenario.name): \(wrong) well-behaved requests failed or got a wrong answer") }
            if sample.count == 0 { report.fail("\(scenario.name): the well-behaved client got no answer") }
            for failure in outcome.failures { report.fail("\(scenario.name): \(failure)") }
            if !server.process.isRunning {
                report.fail("\(scenario.name): the server exited")
                break
            }
        }
        report.add("seconds_per_scenario", .number(seconds))
        report.add("scenarios", .object(JSONObject(scenarioFigures)))
        report.add("server_rss_mib_before", .number((rssBefore * 10).rounded() / 10))
        return report
    }

    /// Sequential valid verifications, about 50 a second, for `seconds`: latency of each, and how many failed.
    static func wellBehavedClient(_ context: Context, seconds: Double) async -> (LatencySample, Int) {
        var sample = LatencySample()
        var wrong = 0
        let deadline = monotonicSeconds() + seconds
        let request = context.tokens.verifyRequest(url: context.server.baseURL)
        while monotonicSeconds() < deadline {
            let sent = monotonicSeconds()
            let response = try? await context.wellBehaved.send(request)
            sample.add((monotonicSeconds() - sent) * 1000)
            if response?.status != 200 || (try? JSONParser.parseObject(response!.body))?["valid"]?.boolValue != true { wrong += 1 }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return (sample, wrong)
    }

    static let scenarios: [Scenario] = [
        Scenario(name: "baseline", summary: "no abuse") { _ in { Outcome() } },
        Scenario(
            name: "slow_bodies",
            summary:
                "200 connections send the headers of a request with a body (verify, batch, notification, revocation), then the body one byte a second"
        ) { context in
            // Every route that reads a body, so that none of them waits on a client for ever; the length is under every
            // route's body limit (16 KiB for notifications and revocations), which would otherwise answer 413 at once.
            let paths = ["/v1/verify", "/v1/verify/batch", "/v1/notifications/apple", "/v1/revocations"]
            let heads = paths.map { path in
                Array("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{".utf8)
            }
            return dripping(context, count: 200, prefixes: heads, expectCutOffWithin: context.requestTimeout + 3)
        },
        Scenario(name: "slow_headers", summary: "200 connections send a request line, then header bytes one a second") { context in
            dripping(context, count: 200, prefixes: [Array("POST /v1/verify HTTP/1.1\r\nX-Slow: ".utf8)], expectCutOffWithin: nil)
        },
        Scenario(name: "idle_connections", summary: "1,000 connections opened and left silent") { context in
            let connections = RawConnections(port: context.port, count: 1000, prefix: [])
            return {
                connections.poll()
                var outcome = Outcome()
                let cut = connections.cutOff
                outcome.figures = [("opened", .integer(Int64(connections.opened))), ("closed_by_server", .integer(Int64(cut)))]
                outcome.lines = [
                    "\(connections.opened) idle connections opened; \(cut) closed by the server (idle timeout \(Int(context.idleTimeout)) s)"
                ]
                if connections.opened < 1000 { outcome.failures.append("only \(connections.opened) of 1,000 connections could be opened") }
                if context.seconds > context.idleTimeout + 3 && cut < connections.opened {
                    outcome.failures.append("\(connections.opened - cut) idle connections outlived the idle timeout")
                }
                connections.closeAll()
                return outcome
            }
        },
        Scenario(
            name: "maximal_batches",
            summary: "two clients in a loop: 1,000 tokens of max_token_bytes (over the body limit), and 1,000 distinct signed 4 KB tokens (under it)"
        ) {
            context in
            looping(context, clients: 2) { round in
                round % 2 == 0
                    ? (context.tokens.oversizedBatch(url: context.server.baseURL), [413])
                    : (context.tokens.signedBatch(url: context.server.baseURL), [200])
            } check: { response in
                guard response.status == 200 else { return true }
                guard let results = (try? JSONParser.parseObject(response.body))?["results"]?.arrayValue else { return false }
                return results.count == 1000 && results.allSatisfy { $0.objectValue?["valid"]?.boolValue == true }
            }
        },
        Scenario(
            name: "nested_json", summary: "two clients in a loop: a 60,000-deep JSON body, and a signed token whose payload is nested 5,000 deep"
        ) {
            context in
            looping(context, clients: 2) { round in
                round % 2 == 0
                    ? (context.tokens.nestedBody(url: context.server.baseURL), [400])
                    : (context.tokens.nestedPayload(url: context.server.baseURL), [401])
            } check: { _ in
                true
            }
        },
        Scenario(name: "oversized_bodies", summary: "two clients in a loop: a body announced as 100 MB") { context in
            looping(context, clients: 2) { _ in
                (context.tokens.hugeAnnouncedBody(url: context.server.baseURL), [413])
            } check: { _ in
                true
            }
        },
    ]

    /// `count` connections, shared out among `prefixes`, that send their prefix, then one byte a second until stopped.
    static func dripping(_ context: Context, count: Int, prefixes: [[UInt8]], expectCutOffWithin: Double?) -> @Sendable () async -> Outcome {
        let groups = prefixes.map { RawConnections(port: context.port, count: count / max(1, prefixes.count), prefix: $0) }
        let shared = LoopState()
        let thread = Thread {
            while shared.running.load(ordering: .relaxed) {
                for connections in groups { connections.drip(UInt8(ascii: "a")) }
                Thread.sleep(forTimeInterval: 1)
            }
        }
        thread.start()
        return {
            shared.running.store(false, ordering: .relaxed)
            try? await Task.sleep(for: .milliseconds(1100))
            for connections in groups { connections.poll() }
            var outcome = Outcome()
            let times = groups.flatMap(\.secondsToCutOff).sorted()
            let cut = times.count
            let slowest = times.last ?? 0
            let opened = groups.reduce(0) { $0 + $1.opened }
            outcome.figures = [
                ("opened", .integer(Int64(opened))), ("cut_off_by_server", .integer(Int64(cut))),
                ("slowest_cut_off_seconds", .number((slowest * 10).rounded() / 10)),
            ]
            outcome.lines = [
                String(format: "%d connections opened; %d answered or closed by the server, the last after %.1f s", opened, cut, slowest)
            ]
            if let limit = expectCutOffWithin, context.seconds > limit {
                if cut < opened { outcome.failures.append("\(opened - cut) slow connections were never cut off") }
                if slowest > limit { outcome.failures.append(String(format: "a slow connection lasted %.1f s (limit %.0f s)", slowest, limit)) }
            }
            for connections in groups { connections.closeAll() }
            return outcome
        }
    }

    /// `clients` tasks sending requests in a loop until stopped; each answer's status must be one of those given.
    static func looping(
        _ context: Context, clients: Int, request: @escaping @Sendable (Int) -> (HTTPRequest, Set<Int>),
        check: @escaping @Sendable (HTTPResponse) -> Bool
    ) -> @Sendable () async -> Outcome {
        let shared = LoopState()
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                for client in 0..<clients {
                    group.addTask {
                        var round = client
                        while shared.running.load(ordering: .relaxed) {
                            let (http, expected) = request(round)
                            round += 1
                            let started = monotonicSeconds()
                            let response = try? await context.client.send(http)
                            let key: String
                            if let response {
                                key = expected.contains(response.status) && check(response) ? "ok \(response.status)" : "WRONG \(response.status)"
                            } else {
                                key = "no answer"
                            }
                            shared.counts.withLock { $0[key, default: 0] += 1 }
                            _ = started
                        }
                    }
                }
            }
        }
        return {
            shared.running.store(false, ordering: .relaxed)
            await task.value
            let result = shared.counts.withLock { $0 }
            var outcome = Outcome()
            outcome.figures = [
                ("abusive_answers", .object(JSONObject(result.sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value))) })))
            ]
            outcome.lines = ["abusive requests: " + result.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")]
            let bad = result.filter { !$0.key.hasPrefix("ok") }.values.reduce(0, +)
            if bad > 0 { outcome.failures.append("\(bad) abusive requests got an unexpected answer or none") }
            if result.isEmpty { outcome.failures.append("no abusive request completed") }
            return outcome
        }
    }
}

/// A loop's stop flag and tallies, shared with the tasks or thread running it.
final class LoopState: Sendable {
    let running = Atomic<Bool>(true)
    let counts = Locked<[String: Int]>([:])
}

/// The tokens and bodies of the abuse scenarios, made once.
struct AbuseTokens: Sendable {
    let key: TestKey
    let valid: String
    let signedBatchBody: [UInt8]
    let oversizedBatchBody: [UInt8]
    let nestedPayloadToken: String

    static func make() throws -> AbuseTokens {
        let key = try TestKey(.rsa(bits: 2048), keyID: "abuse-rsa")
        let now = Int64(Date().timeIntervalSince1970)
        func claims(_ subject: String, padding: Int = 0) -> JSONObject {
            var object = JSONObject([
                ("iss", .string(Abuse.issuer)), ("aud", .string(Abuse.audience)), ("sub", .string(subject)), ("iat", .integer(now)),
                ("exp", .integer(now + 7200)),
            ])
            if padding > 0 { object.set("pad", .string(String(repeating: "p", count: padding))) }
            return object
        }
        let valid = try key.sign(claims("well-behaved"))
        // 1,000 distinct signed tokens of about 4 KB: a batch body of about 4 MB, just under the 4 MiB limit.
        var items: [JSONValue] = []
        for index in 0..<1000 {
            let token = try key.sign(claims("batch-\(index)", padding: 2_600))
            items.append(.object(JSONObject([("provider", .string("abuse")), ("token", .string(token))])))
        }
        let signedBatchBody = JSONWriter.bytes(.object(JSONObject([("items", .array(items))])))
        // 1,000 tokens of exactly max_token_bytes (16,384): a 16 MB body, refused by its size.
        let maximal = String(repeating: "A", count: 16_384)
        let oversized = JSONWriter.bytes(
            .object(
                JSONObject([
                    (
                        "items",
                        .array(Array(repeating: .object(JSONObject([("provider", .string("abuse")), ("token", .string(maximal))])), count: 1000))
                    )
                ])))
        let nestedPayload = String(repeating: "[", count: 5_000) + String(repeating: "]", count: 5_000)
        let header = "{\"alg\":\"RS256\",\"kid\":\"abuse-rsa\"}"
        let nestedToken = try key.signRaw(header: header, payload: nestedPayload)
        return AbuseTokens(key: key, valid: valid, signedBatchBody: signedBatchBody, oversizedBatchBody: oversized, nestedPayloadToken: nestedToken)
    }

    private func post(_ url: String, _ path: String, _ body: [UInt8], headers: [(String, String)] = []) -> HTTPRequest {
        HTTPRequest(
            url: url + path, method: .post, headers: [("Content-Type", "application/json")] + headers, body: body, maximumResponseBytes: 8 << 20)
    }

    func verifyRequest(url: String) -> HTTPRequest {
        post(url, "/v1/verify", JSONWriter.bytes(.object(JSONObject([("provider", .string("abuse")), ("token", .string(valid))]))))
    }
    func signedBatch(url: String) -> HTTPRequest { post(url, "/v1/verify/batch", signedBatchBody) }
    func oversizedBatch(url: String) -> HTTPRequest { post(url, "/v1/verify/batch", oversizedBatchBody) }
    func nestedBody(url: String) -> HTTPRequest {
        post(url, "/v1/verify", Array(String(repeating: "[", count: 60_000).utf8))
    }
    func nestedPayload(url: String) -> HTTPRequest {
        post(url, "/v1/verify", JSONWriter.bytes(.object(JSONObject([("provider", .string("abuse")), ("token", .string(nestedPayloadToken))]))))
    }
    /// Announces 100 MB and sends 1 KB: the server must refuse by the announced length, not wait for it.
    func hugeAnnouncedBody(url: String) -> HTTPRequest {
        post(url, "/v1/verify", Array(repeating: UInt8(ascii: " "), count: 1024), headers: [("Content-Length", "100000000")])
    }
}
