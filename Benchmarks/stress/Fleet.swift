import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// The fleet under faults (`scripts/fleet-test.sh` builds the hosts and runs this inside the load balancer's
/// namespace): three `tokenguard serve` replicas, Redis and an HTTPS IdP, each a network namespace with an address of
/// its own, HAProxy balancing the replicas on `/readyz`. A load of valid, replayed, forged, expired and wrong-nonce
/// tokens goes through HAProxy while one fault at a time happens; every answer is checked against what it must be.
///
/// Plain HTTP from here reaches the replicas only through HAProxy's loopback frontends in this namespace (the HTTP
/// client speaks plain HTTP to loopback only): 8080 balances all three, 8081 only r1, 8091–8093 are r1–r3 each.
enum Fleet {
    static let issuer = "https://idp.fleet.test"
    static let audience = "fleet-app"
    static let provider = "fleet"

    /// Where things are: the script's addresses, folders and binaries (environment `FLEET_*`).
    struct Bed: Sendable {
        let net: String
        let directory: String
        let tokenguard: String
        let prefix: String

        var redisAddress: String { "\(net).20" }
        var idpAddress: String { "\(net).30" }
        func replicaAddress(_ index: Int) -> String { "\(net).\(10 + index)" }
        func namespace(_ host: String) -> String { "\(prefix)-\(host)" }

        static func fromEnvironment() throws -> Bed {
            let env = ProcessInfo.processInfo.environment
            guard let net = env["FLEET_NET"], let directory = env["FLEET_DIR"], let tokenguard = env["FLEET_TOKENGUARD"],
                let prefix = env["FLEET_PREFIX"]
            else { throw RunnerError("run through scripts/fleet-test.sh (FLEET_NET, FLEET_DIR, FLEET_TOKENGUARD, FLEET_PREFIX)") }
            return Bed(net: net, directory: directory, tokenguard: tokenguard, prefix: prefix)
        }
    }

    static func run(secondsPerScenario: Double) async throws -> StressReport {
        let bed = try Bed.fromEnvironment()
        let hosts = Hosts(bed: bed)
        defer { hosts.stopAll() }
        let seconds = max(6, secondsPerScenario)
        say("fleet: \(Int(seconds)) s per scenario; hosts in namespaces \(bed.prefix)-*, subnet \(bed.net).0/24")

        let key = try TestKey(.ec(.p256), keyID: "fleet-1")
        try hosts.publish([key])
        try hosts.startRedis()
        try hosts.startIdP()
        for index in 1...3 { try hosts.startReplica(index) }
        try hosts.startHAProxy()
        let load = try Load(key: key)
        for index in 1...3 { try await load.waitReady(index) }
        say("fleet: 3 replicas ready behind HAProxy")

        var report = StressReport()
        var table: [ScenarioResult] = []
        func finish(_ result: ScenarioResult) {
            table.append(result)
            say(result.line)
            for problem in result.problems.prefix(8) { say("  PROBLEM: \(problem)") }
            if !result.problems.isEmpty { report.fail("\(result.name): \(result.problems.count) problems (first: \(result.problems[0]))") }
        }

        // Throughput: one replica, then three, through HAProxy (all share this machine's cores).
        finish(await load.run(name: "throughput, 1 replica", port: 8081, seconds: seconds, connections: 32))
        finish(await load.run(name: "throughput, 3 replicas", port: 8080, seconds: seconds, connections: 32))

        // A replica killed with SIGKILL under load, then restarted.
        finish(
            await load.run(name: "replica r2 killed (SIGKILL), restarted", port: 8080, seconds: seconds * 1.5, connections: 16) { load in
                try await Task.sleep(for: .seconds(seconds / 4))
                let window = load.openWindow(replayAfterRetry: true)
                hosts.kill("r2")
                try await Task.sleep(for: .seconds(seconds / 4))
                try hosts.startReplica(2)
                try await load.waitReady(2)
                load.closeWindow(window, after: 2)
                try await Task.sleep(for: .seconds(seconds / 4))
                // Back in rotation: the new process has answered verifications HAProxy sent it.
                let served = try await load.verifications(port: 8092)
                return served > 0 ? [] : ["r2 is ready but HAProxy sent it no verification after the restart"]
            })

        // Redis restarted (append-only file, fsync always): claims made before survive it.
        finish(
            await load.run(name: "Redis restarted", port: 8080, seconds: seconds * 1.5, connections: 16) { load in
                try await Task.sleep(for: .seconds(seconds / 4))
                let window = load.openWindow()
                let stopping = monotonicSeconds()
                hosts.stop("redis", signal: SIGTERM)
                say(String(format: "fleet:   Redis stopped in %.1f s", monotonicSeconds() - stopping))
                try await Task.sleep(for: .seconds(1))
                try hosts.startRedis()
                for index in 1...3 {
                    try await load.waitReady(index)
                    say(String(format: "fleet:   r\(index) ready %.1f s after the stop", monotonicSeconds() - stopping))
                }
                say(
                    String(
                        format: "fleet:   Redis stopped and started again; every replica ready %.1f s after the stop", monotonicSeconds() - stopping))
                load.closeWindow(window, after: 3)
                try await Task.sleep(for: .seconds(seconds / 4))
                return await load.replayAccepted(port: 8080, count: 200)
            })

        // Redis cut off from r1 (its packets to Redis dropped in its namespace).
        finish(
            await load.run(name: "Redis cut off from r1", port: 8080, seconds: seconds, connections: 16) { load in
                try await Task.sleep(for: .seconds(seconds / 4))
                let window = load.openWindow()
                try hosts.cut("r1", from: bed.redisAddress)
                try await Task.sleep(for: .seconds(3))
                var problems = await load.directVerdicts(
                    port: 8091, count: 40, allowed: ["replay_store_unavailable", "revocation_store_unavailable", "request_timeout"])
                problems += await load.exactlyOnce(rounds: 1000, ports: [8091, 8092, 8093])
                try hosts.heal("r1")
                // Every connection of r1's pool back, not just one: the next scenario expects r1's verdicts exact.
                problems += await load.recoversSteadily(port: 8091, within: 15)
                // The fault lasts past the heal: claims r1 made just before the cut, and its settles, stay pending in
                // Redis until r1 settles or takes them back, or they age out (10 s). Tokens they touch are undecided
                // meanwhile (503, retry) on every replica; never a wrong verdict or a double acceptance, still checked.
                load.closeWindow(window, after: 10)
                return problems
            })

        // The IdP cut off from r1: cached keys keep verifying there; a new kid there is keys_unavailable, never unknown_key.
        finish(
            await load.run(name: "IdP cut off from r1", port: 8080, seconds: seconds, connections: 8) { load in
                try hosts.cut("r1", from: bed.idpAddress)
                var problems = await load.directVerdicts(port: 8091, count: 40, allowed: ["valid"])
                let next = try TestKey(.ec(.p256), keyID: "fleet-2")
                // From here a token under the new kid (the load replays accepted ones) that HAProxy sends to r1 is
                // rightly keys_unavailable.
                let window = load.openWindow()
                try hosts.publish([key, next])
                try await Task.sleep(for: .seconds(2.5))  // past every replica's refetch cooldown
                problems += await load.directVerdicts(port: 8092, count: 20, allowed: ["valid"], key: next)
                problems += await load.directVerdicts(port: 8091, count: 20, allowed: ["keys_unavailable"], key: next)
                try hosts.heal("r1")
                problems += await load.recovers(port: 8091, within: 15, key: next)
                load.closeWindow(window, after: 1)
                return problems
            })

        // A rolling restart: SIGTERM (not ready, grace, drain), start, ready; not one failed request.
        finish(
            await load.run(name: "rolling restart (SIGTERM, drain, start)", port: 8080, seconds: 0, connections: 16) { load in
                var problems: [String] = []
                for index in 1...3 {
                    hosts.stop("r\(index)", signal: SIGTERM)
                    try hosts.startReplica(index)
                    try await load.waitReady(index)
                    try await Task.sleep(for: .seconds(1.5))  // HAProxy's rise (2 checks, 250 ms apart), with margin
                }
                if (try? await load.verifications(port: 8093)) ?? 0 == 0 { problems.append("r3 took no traffic after its restart") }
                return problems
            })

        say("")
        say("scenario                                     requests    req/s  p99 ms  wrong  double  failed  verdicts")
        for result in table { say(result.tableRow) }
        report.add("scenarios", .array(table.map(\.json)))
        return report
    }
}

/// The result of one scenario: what was sent, what came back, and every answer that broke a promise.
struct ScenarioResult: Sendable {
    var name: String
    var requests = 0
    var seconds = 0.0
    var verdicts: [String: Int] = [:]
    var wrong = 0
    var doubleAcceptances = 0
    var failed = 0
    var replayedAfterRetry = 0
    var latency = LatencySample()
    var problems: [String] = []

    var requestsPerSecond: Double { seconds > 0 ? Double(requests) / seconds : 0 }

    var line: String {
        String(
            format: "fleet: %@: %d requests (%.0f/s), p99 %.2f ms, %d wrong, %d double, %d failed%@", name, requests, requestsPerSecond,
            latency.percentile(99), wrong, doubleAcceptances, failed, replayedAfterRetry > 0 ? ", \(replayedAfterRetry) replayed after a retry" : "")
    }

    var tableRow: String {
        let counts = verdicts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        let padded = name.count >= 44 ? name : name + String(repeating: " ", count: 44 - name.count)
        return padded
            + String(
                format: " %8d %8.0f %7.2f %6d %7d %7d  %@", requests, requestsPerSecond, latency.percentile(99), wrong, doubleAcceptances, failed,
                counts)
    }

    var json: JSONValue {
        .object(
            JSONObject([
                ("name", .string(name)), ("requests", .integer(Int64(requests))), ("requests_per_second", .number(requestsPerSecond.rounded())),
                ("p99_ms", .number((latency.percentile(99) * 100).rounded() / 100)), ("wrong_verdicts", .integer(Int64(wrong))),
                ("double_acceptances", .integer(Int64(doubleAcceptances))), ("failed_requests", .integer(Int64(failed))),
                ("replayed_after_retry", .integer(Int64(replayedAfterRetry))),
                ("verdicts", .object(JSONObject(verdicts.sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value))) }))),
                ("problems", .array(problems.prefix(20).map { .string($0) })),
            ]))
    }
}

/// The processes of the test bed, each started in its namespace with `ip netns exec` and stopped by pid.
final class Hosts: @unchecked Sendable {
    // @unchecked Sendable: the process table is only touched under its lock.
    let bed: Fleet.Bed
    private let processes = Locked<[String: Process]>([:])

    init(bed: Fleet.Bed) { self.bed = bed }

    private func path(_ name: String) -> String { bed.directory + "/" + name }

    /// Starts `arguments` inside `host`'s namespace, output to `<host>.log`; its pid goes to `pids` for the script's
    /// cleanup (which also kills whatever is left in the namespaces).
    private func launch(_ host: String, _ arguments: [String], directory: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = ["netns", "exec", bed.namespace(host)] + arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var environment = ProcessInfo.processInfo.environment
        environment["TOKENGUARD_LOG_LEVEL"] = "notice"
        process.environment = environment
        if !FileManager.default.fileExists(atPath: path("\(host).log")) { FileManager.default.createFile(atPath: path("\(host).log"), contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: path("\(host).log")))
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        // A child inherits the spawning thread's signal mask, and this runs on a dispatch worker thread, which blocks
        // SIGTERM: unblocked for the spawn, or Redis and nginx would never see the SIGTERM of a clean stop.
        var everything = sigset_t()
        var saved = sigset_t()
        sigemptyset(&everything)
        pthread_sigmask(SIG_SETMASK, &everything, &saved)
        defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
        try process.run()
        processes.withLock { $0[host] = process }
        if let pids = FileHandle(forWritingAtPath: path("pids")) {
            pids.seekToEndOfFile()
            pids.write(Data("\(process.processIdentifier)\n".utf8))
            try? pids.close()
        }
    }

    /// The JWKS the IdP serves (written atomically: nginx never serves half a file).
    func publish(_ keys: [TestKey]) throws {
        try FileManager.default.createDirectory(atPath: path("idp/www"), withIntermediateDirectories: true)
        try Data(try SharedTestKeys.jwks(keys).utf8).write(to: URL(fileURLWithPath: path("idp/www/jwks.json")), options: .atomic)
    }

    func startRedis() throws {
        try FileManager.default.createDirectory(atPath: path("redis"), withIntermediateDirectories: true)
        let password = try String(contentsOfFile: path("redis-password"), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        try launch(
            "redis",
            [
                "/usr/bin/redis-server", "--bind", bed.redisAddress, "--port", "6379", "--protected-mode", "no", "--requirepass", password,
                "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--dir", path("redis"),
            ], directory: path("redis"))
    }

    func startIdP() throws {
        let directory = path("idp")
        for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            try FileManager.default.createDirectory(atPath: directory + "/" + sub, withIntermediateDirectories: true)
        }
        let config = NginxProcess.standaloneConfig(
            directory: directory,
            http: """
                    server {
                        listen \(bed.idpAddress):443 ssl;
                        ssl_certificate \(path("idp.pem"));
                        ssl_certificate_key \(path("idp.key"));
                        location = /jwks.json {
                            root \(directory)/www;
                            default_type application/json;
                            add_header Cache-Control "max-age=2";
                        }
                    }
                """, workerConnections: 512)
        try config.write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
        try launch(
            "idp", ["/usr/sbin/nginx", "-p", directory, "-c", directory + "/nginx.conf", "-e", directory + "/error.log"], directory: directory)
    }

    func startReplica(_ index: Int) throws {
        let directory = path("r\(index)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let config = """
            listen: "\(bed.replicaAddress(index)):8080"
            key_archive: "keys.sqlite"
            http: { ca_file: "\(path("ca.pem"))", connect_timeout_ms: 500, timeout_ms: 2000 }
            keys: { min_ttl_seconds: 2, max_ttl_seconds: 10, refetch_cooldown_seconds: 1 }
            server: { shutdown_grace_seconds: 2, request_timeout_seconds: 5 }
            redis: { url: "redis://\(bed.redisAddress):6379", password_file: "\(path("redis-password"))" }
            replay: { store: redis }
            revocations: { store: redis, max_staleness_seconds: 5 }
            providers:
              \(Fleet.provider):
                kind: oidc
                issuer: "\(Fleet.issuer)"
                audiences: ["\(Fleet.audience)"]
                jwks_url: "https://\(bed.idpAddress)/jwks.json"
                nonce: sha256
                algorithms: [ES256]
            """
        try config.write(toFile: directory + "/tokenguard.yaml", atomically: true, encoding: .utf8)
        try launch("r\(index)", [bed.tokenguard, "serve", "--config", directory + "/tokenguard.yaml"], directory: directory)
    }

    func startHAProxy() throws {
        let replicas = (1...3).map { "    server r\($0) \(bed.replicaAddress($0)):8080 check" }.joined(separator: "\n")
        let direct = (1...3).map {
            """
            frontend direct\($0)
                bind 127.0.0.1:809\($0)
                default_backend r\($0)
            backend r\($0)
                server r\($0) \(bed.replicaAddress($0)):8080

            """
        }.joined()
        let config = """
            global
                maxconn 4096
            defaults
                mode http
                timeout connect 1s
                timeout client 30s
                timeout server 10s
                timeout check 2s
                option http-buffer-request
                option redispatch
                retries 3
                retry-on conn-failure empty-response
                http-reuse safe
            frontend fleet
                bind 127.0.0.1:8080
                default_backend replicas
            frontend single
                bind 127.0.0.1:8081
                default_backend one
            backend replicas
                balance roundrobin
                option httpchk GET /readyz
                http-check expect status 200
                default-server inter 250ms fall 2 rise 2
            \(replicas)
            backend one
                option httpchk GET /readyz
                http-check expect status 200
                default-server inter 250ms fall 2 rise 2
                server r1 \(bed.replicaAddress(1)):8080 check
            \(direct)
            """
        try config.write(toFile: path("haproxy.cfg"), atomically: true, encoding: .utf8)
        try launch("lb", ["/usr/sbin/haproxy", "-db", "-f", path("haproxy.cfg")], directory: bed.directory)
    }

    /// SIGKILL, and wait for the exit.
    func kill(_ host: String) { stop(host, signal: SIGKILL) }

    /// Sends `signal` and waits (bounded: 30 s, then SIGKILL) for the exit.
    func stop(_ host: String, signal: Int32) {
        guard let process = processes.withLock({ $0.removeValue(forKey: host) }), process.isRunning else { return }
        Foundation.kill(process.processIdentifier, signal)
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            Foundation.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    func stopAll() {
        for host in processes.withLock({ Array($0.keys) }) { stop(host, signal: SIGKILL) }
    }

    /// Drops every packet `host` sends to `address` (nftables inside its namespace): a silent partition.
    func cut(_ host: String, from address: String) throws {
        try run(host, ["nft", "add table inet fleet"])
        try run(host, ["nft", "add chain inet fleet out { type filter hook output priority 0 ; }"])
        try run(host, ["nft", "add rule inet fleet out ip daddr \(address) drop"])
    }

    func heal(_ host: String) throws { try run(host, ["nft", "delete table inet fleet"]) }

    private func run(_ host: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = ["netns", "exec", bed.namespace(host)] + arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw RunnerError("\(arguments.joined(separator: " ")) in \(host) failed") }
    }
}

/// The load: closed-loop clients through HAProxy, every answer judged. Fault windows say when a failed request or a
/// 503 verdict is allowed; outside them every answer must be exact.
final class Load: Sendable {
    enum Kind: String, CaseIterable, Sendable {
        case valid, replayed, forged, expired
        case wrongNonce = "wrong_nonce"

        var expectedCode: String {
            switch self {
            case .valid: "valid"
            case .replayed: "token_replayed"
            case .forged: "invalid_signature"
            case .expired: "token_expired"
            case .wrongNonce: "nonce_mismatch"
            }
        }
    }

    struct Window: Sendable {
        var start: Double
        var end: Double
        var replayAfterRetry: Bool
    }

    let key: TestKey
    let forger: TestKey
    let client: CurlHTTPClient
    private let counter = Atomic<Int>(0)
    /// Every token answered 200, with how many times (more than once is a double acceptance).
    private let accepted = Locked<[String: (count: Int, nonce: String)]>([:])
    /// Recently accepted tokens, sent again as the "replayed" kind.
    private let recent = Locked<[(token: String, nonce: String)]>([])
    private let windows = Locked<[Window]>([])

    init(key: TestKey) throws {
        self.key = key
        forger = try TestKey(.ec(.p256), keyID: key.keyID)
        var configuration = CurlHTTPClient.Configuration()
        configuration.threads = 48
        configuration.totalTimeoutMilliseconds = 20_000
        configuration.connectTimeoutMilliseconds = 2_000
        client = CurlHTTPClient(configuration: configuration)
    }

    func openWindow(replayAfterRetry: Bool = false) -> Int {
        windows.withLock {
            $0.append(Window(start: monotonicSeconds(), end: .infinity, replayAfterRetry: replayAfterRetry))
            return $0.count - 1
        }
    }

    func closeWindow(_ index: Int, after grace: Double) {
        windows.withLock { $0[index].end = monotonicSeconds() + grace }
    }

    private func window(sentAt: Double, answeredAt: Double) -> Window? {
        windows.withLock { $0.first { answeredAt >= $0.start && sentAt <= $0.end } }
    }

    /// A token of `kind`: (token, raw nonce to present, subject).
    func token(_ kind: Kind, signer: TestKey? = nil) throws -> (String, String, String) {
        if kind == .replayed, let old = recent.withLock({ $0.randomElement() }) { return (old.token, old.nonce, "") }
        let number = counter.add(1, ordering: .relaxed).newValue
        let subject = "fleet-user-\(number)"
        let raw = "fleet-nonce-\(number)-\(UInt64.random(in: 0 ... .max))"
        let now = Int64(Date().timeIntervalSince1970)
        let claims = JSONObject([
            ("iss", .string(Fleet.issuer)), ("aud", .string(Fleet.audience)), ("sub", .string(subject)),
            ("iat", .integer(kind == .expired ? now - 4000 : now)), ("exp", .integer(kind == .expired ? now - 600 : now + 3600)),
            ("nonce", .string(SHA256.hexDigest(raw.utf8))), ("jti", .string("j\(number)")),
        ])
        let token = try (kind == .forged ? forger : signer ?? key).sign(claims)
        return (token, kind == .wrongNonce ? raw + "-other" : raw, subject)
    }

    func send(port: Int, _ path: String, body: [UInt8]? = nil) async -> HTTPResponse? {
        let request =
            body.map { HTTPRequest(url: "http://127.0.0.1:\(port)\(path)", method: .post, headers: [("Content-Type", "application/json")], body: $0) }
            ?? HTTPRequest(url: "http://127.0.0.1:\(port)\(path)", method: .get, headers: [], body: [])
        return try? await client.send(request)
    }

    func verify(port: Int, token: String, nonce: String) async -> HTTPResponse? {
        await send(
            port: port, "/v1/verify",
            body: JSONWriter.bytes(
                .object(JSONObject([("provider", .string(Fleet.provider)), ("token", .string(token)), ("nonce", .string(nonce))]))))
    }

    /// The verdict code and subject of an answer, or nil when it carries no verdict (HAProxy's own error page).
    static func verdict(_ response: HTTPResponse) -> (code: String, subject: String?)? {
        guard let object = try? JSONParser.parseObject(response.body) else { return nil }
        if object["valid"]?.boolValue == true { return ("valid", object["subject"]?.stringValue) }
        guard let code = object["error"]?.objectValue?["code"]?.stringValue else { return nil }
        return (code, nil)
    }

    /// Records a 200 for `token`: false when it had been accepted before (a double acceptance).
    func recordAcceptance(_ token: String, nonce: String) -> Bool {
        let first = accepted.withLock { table -> Bool in
            let count = (table[token]?.count ?? 0) + 1
            table[token] = (count, nonce)
            return count == 1
        }
        if first {
            recent.withLock {
                if $0.count >= 2000 { $0.removeFirst(1000) }
                $0.append((token, nonce))
            }
        }
        return first
    }

    func waitReady(_ index: Int) async throws {
        let deadline = monotonicSeconds() + 30
        while monotonicSeconds() < deadline {
            if let response = await send(port: 8090 + index, "/readyz"), response.status == 200 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw RunnerError("replica r\(index) was not ready within 30 s")
    }

    /// `tokenguard_verifications_total` summed over its labels, from one replica.
    func verifications(port: Int) async throws -> Int {
        guard let response = await send(port: port, "/metrics"), response.status == 200 else { throw RunnerError("no metrics from port \(port)") }
        return String(decoding: response.body, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("tokenguard_verifications_total") }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0) { $0 + Int($1) }
    }

    /// Runs the load for `seconds` (or for as long as `script` takes, when longer) and the fault `script` beside it.
    func run(
        name: String, port: Int, seconds: Double, connections: Int, script: (@Sendable (Load) async throws -> [String])? = nil
    ) async -> ScenarioResult {
        windows.withLock { $0 = [] }
        let stop = StopFlag()
        let started = monotonicSeconds()
        let results = Locked(ScenarioResult(name: name))
        let workers = Task {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<connections {
                    group.addTask { await self.worker(port: port, stop: stop, into: results) }
                }
            }
        }
        var problems: [String] = []
        if let script {
            do { problems = try await script(self) } catch { problems = ["the scenario's script failed: \(error)"] }
        }
        let remaining = seconds - (monotonicSeconds() - started)
        if remaining > 0 { try? await Task.sleep(for: .seconds(remaining)) }
        stop.raise()
        await workers.value
        var result = results.withLock { $0 }
        result.seconds = monotonicSeconds() - started
        result.problems = problems + result.problems
        let doubles = accepted.withLock { $0.values.filter { $0.count > 1 }.count }
        if doubles > 0 { result.problems.append("\(doubles) tokens accepted more than once so far") }
        return result
    }

    private func worker(port: Int, stop: StopFlag, into results: Locked<ScenarioResult>) async {
        var local = ScenarioResult(name: "")
        var sent = 0
        while !stop.isRaised, sent < 1_000_000 {
            sent += 1
            var kind: Kind =
                switch Int.random(in: 0..<100) {
                case 0..<50: .valid
                case 50..<65: .replayed
                case 65..<77: .forged
                case 77..<88: .expired
                default: .wrongNonce
                }
            if kind == .replayed && recent.withLock({ $0.isEmpty }) { kind = .valid }
            guard let (token, nonce, subject) = try? self.token(kind) else { continue }
            let sentAt = monotonicSeconds()
            let response = await verify(port: port, token: token, nonce: nonce)
            let answeredAt = monotonicSeconds()
            local.requests += 1
            local.latency.add((answeredAt - sentAt) * 1000)
            judge(kind, token: token, nonce: nonce, subject: subject, response, sentAt: sentAt, answeredAt: answeredAt, into: &local)
        }
        let finished = local
        results.withLock { total in
            total.requests += finished.requests
            total.wrong += finished.wrong
            total.doubleAcceptances += finished.doubleAcceptances
            total.failed += finished.failed
            total.replayedAfterRetry += finished.replayedAfterRetry
            total.latency.merge(finished.latency)
            for (code, count) in finished.verdicts { total.verdicts[code, default: 0] += count }
            total.problems += finished.problems.prefix(max(0, 20 - total.problems.count))
        }
    }

    private func judge(
        _ kind: Kind, token: String, nonce: String, subject: String, _ response: HTTPResponse?, sentAt: Double, answeredAt: Double,
        into result: inout ScenarioResult
    ) {
        let window = self.window(sentAt: sentAt, answeredAt: answeredAt)
        guard let response, let (code, answeredSubject) = Self.verdict(response) else {
            result.failed += 1
            result.verdicts["(no verdict: HTTP \(response.map { String($0.status) } ?? "none"))", default: 0] += 1
            if window == nil { result.problems.append("\(kind.rawValue): no verdict (HTTP \(response?.status ?? 0)) outside a fault") }
            return
        }
        result.verdicts[code, default: 0] += 1
        if code == "valid" {
            if !recordAcceptance(token, nonce: nonce) {
                result.doubleAcceptances += 1
                result.problems.append("\(kind.rawValue): a token accepted twice")
                return
            }
            if kind != .valid || response.status != 200 || answeredSubject != subject {
                result.wrong += 1
                result.problems.append("\(kind.rawValue): HTTP \(response.status) valid for \(answeredSubject ?? "?"), expected \(kind.expectedCode)")
            }
            return
        }
        let unavailable = ["replay_store_unavailable", "keys_unavailable", "revocation_store_unavailable", "request_timeout"].contains(code)
        if unavailable && response.status == 503 {
            result.failed += 1
            if window == nil { result.problems.append("\(kind.rawValue): 503 \(code) outside a fault") }
            return
        }
        if kind == .valid && code == "token_replayed" && window?.replayAfterRetry == true {
            result.replayedAfterRetry += 1  // HAProxy resent it after the replica that claimed it died before answering
            return
        }
        if code != kind.expectedCode || response.status != 401 {
            result.wrong += 1
            result.problems.append("\(kind.rawValue): HTTP \(response.status) \(code), expected \(kind.expectedCode)")
        }
    }

    /// `count` fresh valid tokens sent to one replica (its direct frontend): every verdict must be one of `allowed`.
    func directVerdicts(port: Int, count: Int, allowed: Set<String>, key signer: TestKey? = nil) async -> [String] {
        var problems: [String] = []
        for _ in 0..<count {
            guard let (token, nonce, _) = try? token(.valid, signer: signer) else { continue }
            guard let response = await verify(port: port, token: token, nonce: nonce), let (code, _) = Self.verdict(response) else {
                problems.append("port \(port): no verdict")
                continue
            }
            if code == "valid" && !recordAcceptance(token, nonce: nonce) { problems.append("port \(port): a token accepted twice") }
            if !allowed.contains(code) { problems.append("port \(port): \(code), expected \(allowed.sorted().joined(separator: " or "))") }
        }
        return problems
    }

    /// Tokens accepted earlier sent again: every one must be `token_replayed`.
    func replayAccepted(port: Int, count: Int) async -> [String] {
        let old = recent.withLock { Array($0.prefix(count)) }
        var problems: [String] = []
        for (token, nonce) in old {
            guard let response = await verify(port: port, token: token, nonce: nonce), let (code, _) = Self.verdict(response) else {
                problems.append("replay after the restart: no verdict")
                continue
            }
            if code == "valid" {
                _ = recordAcceptance(token, nonce: nonce)
                problems.append("a token accepted before Redis restarted was accepted again")
            } else if code != "token_replayed" {
                problems.append("replay after the restart: \(code)")
            }
        }
        if old.isEmpty { problems.append("no accepted tokens to replay") }
        return problems
    }

    /// `rounds` fresh tokens, each sent to every port at once: accepted exactly once each (16 rounds in flight).
    func exactlyOnce(rounds: Int, ports: [Int]) async -> [String] {
        let outcome = Locked((exactlyOne: 0, none: 0, more: 0))
        await withTaskGroup(of: Void.self) { group in
            var next = 0
            func addRound() {
                guard next < rounds, let (token, nonce, _) = try? token(.valid) else { return }
                next += 1
                group.addTask {
                    let answers = await withTaskGroup(of: Bool.self) { inner in
                        for port in ports { inner.addTask { await self.verify(port: port, token: token, nonce: nonce)?.status == 200 } }
                        var accepted = 0
                        for await ok in inner where ok { accepted += 1 }
                        return accepted
                    }
                    if answers > 0 { for _ in 0..<answers { _ = self.recordAcceptance(token, nonce: nonce) } }
                    outcome.withLock {
                        switch answers {
                        case 1: $0.exactlyOne += 1
                        case 0: $0.none += 1
                        default: $0.more += 1
                        }
                    }
                }
            }
            for _ in 0..<16 { addRound() }
            while await group.next() != nil { addRound() }
        }
        let (one, none, more) = outcome.withLock { $0 }
        say(
            "fleet:   exactly-once: \(rounds) tokens × \(ports.count) replicas at once: \(one) accepted once, \(none) not at all, \(more) more than once"
        )
        var problems: [String] = []
        if more > 0 { problems.append("\(more) of \(rounds) tokens sent to every replica at once were accepted more than once") }
        if none > rounds / 100 { problems.append("\(none) of \(rounds) tokens sent to every replica were accepted by none") }
        return problems
    }

    /// After a fault heals: `port` answers `consecutive` fresh tokens in a row valid within `seconds` (a request that
    /// was already waiting on the fault when it healed may still fail meanwhile).
    func recoversSteadily(port: Int, within seconds: Double, consecutive: Int = 40) async -> [String] {
        let started = monotonicSeconds()
        var inARow = 0
        var failures = 0
        while monotonicSeconds() - started < seconds {
            guard let (token, nonce, _) = try? token(.valid) else { continue }
            let answer = await verify(port: port, token: token, nonce: nonce)
            let code = answer.flatMap { Self.verdict($0)?.code }
            if code == "valid" {
                if !recordAcceptance(token, nonce: nonce) { return ["port \(port): a token accepted twice"] }
                inARow += 1
                if inARow == consecutive {
                    say(
                        String(
                            format: "fleet:   port \(port) steady %.2f s after the heal (%d refusals meanwhile)", monotonicSeconds() - started,
                            failures))
                    return []
                }
            } else {
                // Undecided (503, retry) is what a replica says while it cannot reach Redis; anything else is wrong.
                if let code, !["replay_store_unavailable", "revocation_store_unavailable", "request_timeout"].contains(code) {
                    return ["port \(port): \(code) for a fresh token after the heal"]
                }
                inARow = 0
                failures += 1
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        return ["port \(port) did not accept \(consecutive) fresh tokens in a row within \(Int(seconds)) s of the fault healing"]
    }

    /// After a fault heals, the replica accepts fresh tokens again within `seconds`.
    func recovers(port: Int, within seconds: Double, key signer: TestKey? = nil) async -> [String] {
        let deadline = monotonicSeconds() + seconds
        while monotonicSeconds() < deadline {
            if let (token, nonce, _) = try? token(.valid, signer: signer), let response = await verify(port: port, token: token, nonce: nonce),
                response.status == 200
            {
                _ = recordAcceptance(token, nonce: nonce)
                return []
            }
            try? await Task.sleep(for: .milliseconds(250))
        }
        return ["port \(port) did not accept a fresh token within \(Int(seconds)) s of the fault healing"]
    }
}

/// Tells the load's workers to finish.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isRaised: Bool { flag.load(ordering: .relaxed) }
    func raise() { flag.store(true, ordering: .relaxed) }
}
