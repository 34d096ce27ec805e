import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// The soak test: the real `tokenguard serve` under sustained load for a bounded time, with a mix of valid,
/// expired, forged and malformed tokens, while the local IdP rotates keys, fails with 500s, goes slow and
/// comes back. Every answer is checked against the verdict it must have; resident memory is sampled.
///
/// Each 60-second cycle (shorter runs shrink it): at 0 s a new key is published beside the current one; at
/// 12 s tokens are signed with it; 20–30 s the IdP answers 500; at 36 s the old key is withdrawn; 40–50 s the
/// IdP answers only after tokenguard's timeout. The expected verdicts follow from what the IdP actually
/// delivered (``SoakIdP``): a token whose key tokenguard has been able to fetch must get its exact verdict at
/// any time, outage or not; `keys_unavailable` (503) is accepted only where tokenguard could not know better.
enum Soak {
    static let issuer = "https://idp.soak.test"
    static let audience = "soak-app"
    static let rawNonce = "soak-raw-nonce"
    static let provider = "soak"
    static let connections = 6
    /// After a fault window ends, how long an unknown kid may still be answered keys_unavailable at least: the refetch
    /// cooldown (2 s) plus one outbound timeout (3 s), with margin. Longer when tokenguard is still backing off after
    /// the failures: then until a second after its first good fetch (see ``allowedCodes``).
    static let faultGrace = 10.0
    /// How soon after a fault window ends tokenguard must have fetched the keys again. It backs off 1, 2, 4, 8, 16 s
    /// (±10 %) after consecutive failures, and the two windows of a short cycle can leave it five failures deep
    /// (a retry after the 500s that lands in the slow window), so up to about 21 s after the slow window's end (its
    /// last fetch times out 3 s after it); more would be a stuck retry.
    static let recoveryBound = 30.0
    static let maximumRequests = 50_000_000

    enum Kind: String, CaseIterable, Sendable {
        case valid, expired, forged, malformed
        case wrongNonce = "wrong_nonce"
        case wrongAudience = "wrong_audience"
        case unknownKid = "unknown_kid"
        case retired
        case algNone = "alg_none"

        /// The verdict code when tokenguard holds the right keys.
        var expectedCode: String {
            switch self {
            case .valid: "valid"
            case .expired: "token_expired"
            case .forged: "invalid_signature"
            case .malformed: "malformed_token"
            case .wrongNonce: "nonce_mismatch"
            case .wrongAudience: "invalid_audience"
            case .unknownKid, .retired: "unknown_key"
            case .algNone: "unsupported_algorithm"
            }
        }
    }

    /// Tokens made ahead for one signing key (signing is far slower than verifying).
    struct Pool: Sendable {
        let key: TestKey
        var tokens: [Kind: [(token: String, subject: String)]]
    }

    /// What the load workers use now; replaced as keys rotate.
    struct Signing: Sendable {
        var current: Pool
        var retired: Pool?
    }

    /// State shared by the load workers and the IdP script.
    final class Shared: Sendable {
        let signing: Locked<Signing>
        let faultWindows = Locked<[FaultWindow]>([])
        let tally = Locked(Tally())
        let stop = Atomic<Bool>(false)
        init(signing: Signing) { self.signing = Locked(signing) }
    }

    struct FaultWindow: Sendable {
        var start: Double
        var end: Double
    }

    struct Tally: Sendable {
        var byKind: [String: [String: Int]] = [:]
        var wrong: [String] = []
        var wrongCount = 0
        var unexpected5xx = 0
        var transportErrors = 0
        var requests = 0
        var latency: [String: LatencySample] = [:]
    }

    static func run(seconds: Double) async throws -> StressReport {
        let total = max(20, seconds)
        let cycle = min(60, max(20, total / 2))
        func at(_ secondInCycle: Double) -> Double { secondInCycle / 60 * cycle }
        say("soak: \(Int(total)) s, cycle \(Int(cycle)) s, \(connections) connections, loopback only")

        let idp = try SoakIdP()
        defer { idp.stop() }
        var generation = 0
        func newKey() throws -> TestKey {
            generation += 1
            return generation % 2 == 1
                ? try TestKey(.rsa(bits: 2048), keyID: "soak-rsa-\(generation)") : try TestKey(.ec(.p256), keyID: "soak-ec-\(generation)")
        }
        let first = try newKey()
        try idp.publish([first])

        let workspace = try TempWorkspace()
        let config = try workspace.write(
            "soak.yaml",
            """
            keys: { min_ttl_seconds: 2, max_ttl_seconds: 5, refetch_cooldown_seconds: 2 }
            http: { connect_timeout_ms: 1000, timeout_ms: 3000 }
            server: { request_timeout_seconds: 10 }
            providers:
              \(provider):
                kind: oidc
                issuer: "\(issuer)"
                audiences: ["\(audience)"]
                jwks_url: "\(idp.jwksURL)"
                dev_idp: true
                nonce: sha256
                algorithms: [RS256, ES256]
            """)
        let server = try await ServerProcess(arguments: ["--config", config], environment: ["TOKENGUARD_LOG_LEVEL": "warning"], workspace: workspace)
        defer { server.stop() }
        let pid = server.process.processIdentifier

        let shared = Shared(signing: Signing(current: try makePool(first)))
        let started = monotonicSeconds()
        let deadline = started + total

        var http = CurlHTTPClient.Configuration()
        http.threads = connections
        http.totalTimeoutMilliseconds = 15_000
        http.connectTimeoutMilliseconds = 2_000
        let client = CurlHTTPClient(configuration: http)
        let url = server.baseURL + "/v1/verify"

        // The load: closed loop on each connection, every answer checked.
        let workers = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<connections {
                    group.addTask {
                        var random = SystemRandomNumberGenerator()
                        var local = Tally()
                        var sent = 0
                        while !shared.stop.load(ordering: .relaxed), sent < maximumRequests / connections {
                            sent += 1
                            let kind = pickKind(&random)
                            let state = shared.signing.withLock { $0 }
                            let (token, subject, keyID) = tokenFor(kind, state, &random)
                            let nonce = kind == .wrongNonce ? "some-other-nonce" : rawNonce
                            let body = JSONWriter.bytes(
                                .object(JSONObject([("provider", .string(provider)), ("token", .string(token)), ("nonce", .string(nonce))])))
                            let phase = idp.mode.rawValue
                            let sentAt = monotonicSeconds()
                            let response = try? await client.send(
                                HTTPRequest(url: url, method: .post, headers: [("Content-Type", "application/json")], body: body))
                            let answeredAt = monotonicSeconds()
                            local.requests += 1
                            local.latency[phase, default: LatencySample()].add((answeredAt - sentAt) * 1000)
                            guard let response else {
                                local.transportErrors += 1
                                record(&local, "\(kind.rawValue): no answer (transport error or timeout)")
                                continue
                            }
                            let (code, answeredSubject) = verdictCode(response)
                            local.byKind[kind.rawValue, default: [:]][code, default: 0] += 1
                            if response.status >= 500 && code != "keys_unavailable" {
                                local.unexpected5xx += 1
                                record(&local, "\(kind.rawValue): HTTP \(response.status) \(code)")
                                continue
                            }
                            let allowed = allowedCodes(
                                kind, keyID: keyID, sentAt: sentAt, answeredAt: answeredAt, idp: idp, faults: shared.faultWindows.withLock { $0 })
                            let statusOK = expectedStatus(code) == response.status
                            let subjectOK = code != "valid" || answeredSubject == subject
                            if !allowed.contains(code) || !statusOK || !subjectOK {
                                record(
                                    &local,
                                    String(
                                        format: "%@ at %.1f s (%@): HTTP %d %@, expected %@", kind.rawValue, sentAt - started, phase, response.status,
                                        code, allowed.sorted().joined(separator: "|")))
                            }
                        }
                        _ = worker
                        let finished = local
                        shared.tally.withLock { total in
                            total.requests += finished.requests
                            total.transportErrors += finished.transportErrors
                            total.unexpected5xx += finished.unexpected5xx
                            total.wrongCount += finished.wrongCount
                            total.wrong += finished.wrong.prefix(20 - min(20, total.wrong.count))
                            for (kind, codes) in finished.byKind {
                                for (code, count) in codes { total.byKind[kind, default: [:]][code, default: 0] += count }
                            }
                            for (phase, sample) in finished.latency { total.latency[phase, default: LatencySample()].merge(sample) }
                        }
                    }
                }
            }
        }

        // The IdP's script, one step per second; resident memory every 5 s.
        var rss: [(Double, Double)] = []
        var cycleStart = started
        var pendingKey: TestKey? = nil
        var pendingPool: Pool? = nil
        var withdrawn = false
        var step = 0
        while monotonicSeconds() < deadline {
            let now = monotonicSeconds()
            let t = now - cycleStart
            if t >= cycle {
                cycleStart += cycle
                withdrawn = false
                continue
            }
            if pendingKey == nil, t < at(12), now - started > 1 {
                let key = try newKey()
                let current = shared.signing.withLock { $0.current.key }
                try idp.publish([current, key])
                pendingKey = key
                pendingPool = try makePool(key)
            }
            if let key = pendingKey, let pool = pendingPool, t >= at(12) {
                shared.signing.withLock { state in
                    state.retired = state.current
                    state.current = pool
                }
                _ = key
                pendingKey = nil
                pendingPool = nil
            }
            if !withdrawn, t >= at(36) {
                let current = shared.signing.withLock { $0.current.key }
                try idp.publish([current])
                withdrawn = true
            }
            let mode: SoakIdP.Mode = (t >= at(20) && t < at(30)) ? .failing : (t >= at(40) && t < at(50)) ? .slow : .normal
            let previous = idp.mode
            if mode != previous {
                idp.set(mode)
                shared.faultWindows.withLock { windows in
                    if mode != .normal {
                        windows.append(FaultWindow(start: now, end: .infinity))
                    } else if let last = windows.indices.last {
                        windows[last].end = now
                    }
                }
            }
            if step % 5 == 0, let mib = residentMiB(pid: pid) { rss.append((now - started, mib)) }
            if step % 30 == 0 {
                let count = shared.tally.withLock { $0.requests }
                say(
                    String(format: "soak: %4.0f s, IdP %@, server RSS %.1f MiB", now - started, mode.rawValue, rss.last?.1 ?? 0)
                        + (count > 0 ? ", \(count) checked" : ""))
            }
            step += 1
            try await Task.sleep(for: .milliseconds(1000))
        }
        shared.stop.store(true, ordering: .relaxed)
        await workers.value
        if let mib = residentMiB(pid: pid) { rss.append((monotonicSeconds() - started, mib)) }
        let serverAlive = server.process.isRunning

        // The report.
        let result = shared.tally.withLock { $0 }
        var report = StressReport()
        let elapsed = monotonicSeconds() - started
        report.add("seconds", .number(elapsed.rounded()))
        report.add("requests", .integer(Int64(result.requests)))
        report.add("requests_per_second", .number((Double(result.requests) / elapsed).rounded()))
        report.add("wrong_verdicts", .integer(Int64(result.wrongCount)))
        report.add("unexpected_5xx", .integer(Int64(result.unexpected5xx)))
        report.add("transport_errors", .integer(Int64(result.transportErrors)))
        report.add(
            "codes_by_kind",
            .object(
                JSONObject(
                    result.byKind.sorted { $0.key < $1.key }.map { kind, codes in
                        (kind, .object(JSONObject(codes.sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value))) })))
                    })))
        report.add("latency_by_idp_mode", .object(JSONObject(result.latency.sorted { $0.key < $1.key }.map { ($0.key, $0.value.json) })))
        let (good, bad) = idp.answers
        report.add("idp_answers", .object(JSONObject([("good", .integer(Int64(good))), ("failed_or_slow", .integer(Int64(bad)))])))
        report.add("key_generations", .integer(Int64(generation)))
        // Memory: the first sample after 10 s of load (caches warm), the largest, and the last.
        let settled = rss.first { $0.0 >= min(10, elapsed / 4) }?.1 ?? rss.first?.1 ?? 0
        let peak = rss.map(\.1).max() ?? 0
        let end = rss.last?.1 ?? 0
        report.add(
            "server_rss_mib",
            .object(
                JSONObject([
                    ("settled", .number((settled * 10).rounded() / 10)), ("peak", .number((peak * 10).rounded() / 10)),
                    ("end", .number((end * 10).rounded() / 10)),
                    ("samples", .array(rss.map { .array([.number($0.0.rounded()), .number(($0.1 * 10).rounded() / 10)]) })),
                ])))

        say(
            String(
                format: "soak: %d requests in %.0f s (%.0f/s); %d wrong verdicts, %d unexpected 5xx, %d transport errors",
                result.requests, elapsed, Double(result.requests) / elapsed, result.wrongCount, result.unexpected5xx, result.transportErrors))
        for (kind, codes) in result.byKind.sorted(by: { $0.key < $1.key }) {
            say("  \(kind): " + codes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        for (phase, sample) in result.latency.sorted(by: { $0.key < $1.key }) { say("  latency while IdP \(phase): \(sample.summary)") }
        say(
            String(
                format: "  server RSS: %.1f MiB settled, %.1f MiB peak, %.1f MiB at the end; IdP answers: %d good, %d failed or slow", settled, peak,
                end, good, bad))
        for line in result.wrong.prefix(10) { say("  WRONG: \(line)") }

        if result.requests == 0 { report.fail("no requests were made") }
        if result.wrongCount > 0 { report.fail("\(result.wrongCount) wrong verdicts") }
        if result.unexpected5xx > 0 { report.fail("\(result.unexpected5xx) 5xx answers other than keys_unavailable") }
        if result.transportErrors > 0 { report.fail("\(result.transportErrors) requests without an answer") }
        if !serverAlive { report.fail("the server exited during the soak") }
        if bad == 0 && total >= 40 { report.fail("the IdP never failed: the outage windows did not happen") }
        // Every fault's end must be followed by a good fetch within the bound (or the run ended before it could be).
        let stopped = monotonicSeconds()
        var slowestRecovery = 0.0
        let windows = shared.faultWindows.withLock { $0 }
        for (index, window) in windows.enumerated() where window.end.isFinite {
            let recovered = idp.firstGoodAnswer(after: window.end) ?? stopped
            // Faults the IdP was not good between count as one: the wait runs from the last one's end.
            if index + 1 < windows.count, windows[index + 1].start <= recovered { continue }
            let waited = recovered - window.end
            slowestRecovery = max(slowestRecovery, waited)
            if waited > recoveryBound {
                report.fail(String(format: "no good key fetch within %.0f s of the IdP's recovery at %.1f s", recoveryBound, window.end - started))
            }
        }
        report.add("slowest_recovery_seconds", .number((slowestRecovery * 10).rounded() / 10))
        say(String(format: "  slowest recovery: first good key fetch %.1f s after a fault ended", slowestRecovery))
        // Flat memory: at the end no more than 48 MiB or half again above the settled size.
        if end > settled + max(48, settled / 2) { report.fail(String(format: "server RSS grew from %.1f to %.1f MiB", settled, end)) }
        return report
    }

    static func record(_ tally: inout Tally, _ line: String) {
        tally.wrongCount += 1
        if tally.wrong.count < 20 { tally.wrong.append(line) }
    }

    static func pickKind(_ random: inout SystemRandomNumberGenerator) -> Kind {
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<40: .valid
        case 40..<50: .expired
        case 50..<58: .forged
        case 58..<68: .malformed
        case 68..<73: .wrongNonce
        case 73..<78: .wrongAudience
        case 78..<88: .unknownKid
        case 88..<95: .retired
        default: .algNone
        }
    }

    /// The token to send for `kind`, the subject a valid verdict must name, and the kid it was signed under.
    static func tokenFor(_ kind: Kind, _ state: Signing, _ random: inout SystemRandomNumberGenerator) -> (String, String, String?) {
        switch kind {
        case .malformed:
            let (token, _) = state.current.tokens[.valid]!.randomElement(using: &random)!
            let parts = segments(token)
            let variants = [
                "not-a-token", parts[0] + "." + parts[1], "!!!." + parts[1] + "." + parts[2], token + ".extra",
                parts[0] + "." + parts[1] + "=." + parts[2], String(parts[1].prefix(40)),
            ]
            return (variants.randomElement(using: &random)!, "", nil)
        case .algNone:
            let header = Base64URL.encode(Array("{\"alg\":\"none\",\"kid\":\"\(state.current.key.keyID)\"}".utf8))
            let payload = segments(state.current.tokens[.valid]![0].token)[1]
            return ("\(header).\(payload).", "", nil)
        case .retired:
            guard let retired = state.retired, let pick = retired.tokens[.valid]!.randomElement(using: &random) else {
                let pick = state.current.tokens[.valid]!.randomElement(using: &random)!
                return (pick.token, pick.subject, state.current.key.keyID)  // no retired key yet: a valid token
            }
            return (pick.token, pick.subject, retired.key.keyID)
        default:
            let pick = state.current.tokens[kind]!.randomElement(using: &random)!
            return (pick.token, pick.subject, kind == .unknownKid ? nil : state.current.key.keyID)
        }
    }

    /// The codes a correct tokenguard may answer for this request, given what the IdP delivered before it.
    static func allowedCodes(_ kind: Kind, keyID: String?, sentAt: Double, answeredAt: Double, idp: SoakIdP, faults: [FaultWindow]) -> Set<String> {
        // A request overlaps a fault when it was still unanswered as the IdP began failing (the refetch it
        // triggers happens after it is sent), or was sent before the fault's effect ran out: the grace after its end,
        // or a second after the IdP's first good answer since (tokenguard backs off after failures, and until it
        // fetches again it cannot know a kid is unknown rather than new). ``recoveryBound`` bounds that wait.
        let inFault = faults.contains { window in
            guard answeredAt >= window.start else { return false }
            let recovered = window.end.isFinite ? idp.firstGoodAnswer(after: window.end) ?? .infinity : .infinity
            return sentAt <= max(window.end + faultGrace, recovered + 1)
        }
        switch kind {
        case .malformed, .algNone:
            return [kind.expectedCode]
        case .unknownKid:
            return inFault ? ["unknown_key", "keys_unavailable"] : ["unknown_key"]
        case .retired:
            // Valid until tokenguard can have seen a JWKS without the key; unknown_key from a second after that.
            guard let keyID, let gone = idp.firstServedWithout(keyID) else { return ["valid"] }
            var allowed: Set<String> = gone <= sentAt - 1 ? ["unknown_key"] : ["valid", "unknown_key"]
            if inFault { allowed.insert("keys_unavailable") }
            return allowed
        default:
            // Signed under a published kid: exact, once the IdP has delivered that key.
            if let keyID, let served = idp.firstServed(keyID), served <= sentAt - 1 { return [kind.expectedCode] }
            return [kind.expectedCode, "keys_unavailable"]
        }
    }

    static func expectedStatus(_ code: String) -> Int {
        switch code {
        case "valid": 200
        case "keys_unavailable", "replay_store_unavailable": 503
        case "invalid_request", "unknown_provider": 400
        default: 401
        }
    }

    static func verdictCode(_ response: HTTPResponse) -> (code: String, subject: String?) {
        guard let object = try? JSONParser.parseObject(response.body) else { return ("unparseable_body", nil) }
        if object["valid"]?.boolValue == true { return ("valid", object["subject"]?.stringValue) }
        return (object["error"]?.objectValue?["code"]?.stringValue ?? "no_code", nil)
    }

    /// Tokens for one key: distinct subjects, so the verified-token cache sees many tokens, not one.
    static func makePool(_ key: TestKey) throws -> Pool {
        let now = Int64(Date().timeIntervalSince1970)
        let forger = try TestKey(key.algorithm == .rs256 ? .rsa(bits: 2048) : .ec(.p256), keyID: key.keyID)
        let nonce = SHA256.hexDigest(rawNonce.utf8)
        func claims(_ subject: String, audience: String = audience, expiresIn: Int64 = 7200, issuedAgo: Int64 = 0) -> JSONObject {
            JSONObject([
                ("iss", .string(issuer)), ("aud", .string(audience)), ("sub", .string(subject)), ("iat", .integer(now - issuedAgo)),
                ("exp", .integer(now + expiresIn)), ("nonce", .string(nonce)), ("jti", .string(UUIDLike.make())),
            ])
        }
        var tokens: [Kind: [(String, String)]] = [:]
        for index in 0..<120 {
            let subject = "user-\(key.keyID)-\(index)"
            tokens[.valid, default: []].append((try key.sign(claims(subject)), subject))
        }
        for index in 0..<20 {
            let subject = "other-\(key.keyID)-\(index)"
            tokens[.expired, default: []].append((try key.sign(claims(subject, expiresIn: -600, issuedAgo: 4000)), subject))
            tokens[.forged, default: []].append((try forger.sign(claims(subject)), subject))
            tokens[.wrongNonce, default: []].append((try key.sign(claims(subject)), subject))
            tokens[.wrongAudience, default: []].append((try key.sign(claims(subject, audience: "someone-else")), subject))
            tokens[.unknownKid, default: []].append((try key.sign(claims(subject), keyID: "never-published-\(UUIDLike.make())"), subject))
        }
        return Pool(key: key, tokens: tokens)
    }
}

enum UUIDLike {
    static func make() -> String { UUID().uuidString.lowercased() }
}
