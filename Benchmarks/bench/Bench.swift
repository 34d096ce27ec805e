import Dispatch
import Foundation
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardRedis
import TokenGuardService
import TokenGuardTestSupport

struct Measurement {
    let section: String
    let name: String
    let value: Double
    let unit: String
    var ratio: (to: String, value: Double)? = nil
}

struct Report {
    var mode: String
    var measurements: [Measurement] = []
    var targets: [(key: String, value: Double, target: Double, met: Bool, note: String)] = []
    /// Targets this run could not measure, with the reason: reported as such, never as a value of 0.
    var unmeasuredTargets: [(key: String, target: Double, reason: String)] = []
    var notes: [String] = []

    mutating func add(_ section: String, _ name: String, _ value: Double, _ unit: String = "/s", ratio: (String, Double)? = nil) {
        measurements.append(Measurement(section: section, name: name, value: value, unit: unit, ratio: ratio))
    }

    /// `higherIsBetter` false for latencies and memory: met when value ≤ target.
    mutating func target(_ key: String, _ value: Double, _ target: Double, higherIsBetter: Bool = true, note: String = "") {
        targets.append((key, value, target, higherIsBetter ? value >= target : value <= target, note))
    }

    static func pad(_ text: String, _ width: Int) -> String { text.count >= width ? text : text + String(repeating: " ", count: width - text.count) }

    mutating func unmeasured(_ key: String, _ target: Double, reason: String) { unmeasuredTargets.append((key, target, reason)) }

    func table() -> String {
        var lines = ["tokenguard bench (\(mode)) on \(ProcessInfo.processInfo.activeProcessorCount) cores", String(repeating: "-", count: 96)]
        for m in measurements {
            let ratio = m.ratio.map { String(format: "  %.2fx %@", $0.value, $0.to) } ?? ""
            lines.append(Self.pad(m.section, 11) + Self.pad(m.name, 48) + String(format: "%14.2f ", m.value) + m.unit + ratio)
        }
        lines.append(String(repeating: "-", count: 96))
        for t in targets {
            lines.append(
                "target " + Self.pad(t.key, 32) + String(format: "%12.2f  (target %.2f)  ", t.value, t.target) + (t.met ? "met" : "MISSED")
                    + (t.note.isEmpty ? "" : "  \(t.note)"))
        }
        for t in unmeasuredTargets {
            lines.append(
                "target " + Self.pad(t.key, 32) + String(repeating: " ", count: 11) + String(format: "-  (target %.2f)  ", t.target)
                    + "not measured  \(t.reason)")
        }
        return (lines + notes).joined(separator: "\n")
    }

    func json() -> String {
        var root = JSONObject([("mode", .string(mode)), ("cores", .integer(Int64(ProcessInfo.processInfo.activeProcessorCount)))])
        root.set(
            "measurements",
            .array(
                measurements.map { m in
                    var object = JSONObject([
                        ("section", .string(m.section)), ("name", .string(m.name)), ("value", .number(m.value)), ("unit", .string(m.unit)),
                    ])
                    if let ratio = m.ratio {
                        object.set("ratio", .number(ratio.value))
                        object.set("ratio_to", .string(ratio.to))
                    }
                    return .object(object)
                }))
        var targetObject = JSONObject()
        for t in targets {
            targetObject.set(t.key, .object(JSONObject([("value", .number(t.value)), ("target", .number(t.target)), ("met", .bool(t.met))])))
        }
        for t in unmeasuredTargets {
            targetObject.set(
                t.key, .object(JSONObject([("value", .null), ("target", .number(t.target)), ("met", .null), ("reason", .string(t.reason))])))
        }
        root.set("targets", .object(targetObject))
        root.set("notes", .array(notes.map(JSONValue.string)))
        return JSONWriter.string(.object(root))
    }
}

struct Bench {
    /// Refused tokens of every shape: empty, two segments, not base64url, a real token with a bad last byte, four segments.
    static func malformedTokens(_ token: String) -> [String] {
        ["", "a.b", "not a token at all", String(token.dropLast(1)) + "!", "e30.e30.e30.e30"]
    }

    let quick: Bool

    /// Whether this build has the jwt-kit peers (see `TOKENGUARD_BENCH_PEERS` in Package.swift).
    static var peersBuilt: Bool {
        #if TOKENGUARD_BENCH_PEERS
            true
        #else
            false
        #endif
    }
    static let peersLeftOut = "jwt-kit peers not built (TOKENGUARD_BENCH_PEERS=off)"

    /// How a `*_vs_floor` target was measured.
    static var pairedNote: String {
        HTTPLoad.wrk == nil
            ? "the two maxima"
            : "median of \(HTTPLoad.floorRounds) paired 1 s wrk runs, /healthz and the request each first in turn (ABBA), on one server"
    }
    var seconds: Double { quick ? 0.15 : 1.0 }

    func verifies(_ fixture: Fixture, _ verifier: TokenVerifier) -> Bool {
        if case .success = verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now) { return true }
        return false
    }

    func run() async throws -> Report {
        var report = Report(mode: quick ? "quick" : "full")
        let fixtures = try Fixture.all()
        var limits: [String: Double] = [:]
        var single: [String: Double] = [:]
        var overheads: [String: Double] = [:]
        var pairedRatios: [String: Double] = [:]

        // The limit, and tokenguard's full verification, single thread, on the same tokens.
        for fixture in fixtures {
            let raw = try RawOpenSSLVerifier(fixture: fixture)
            let limit = Measure.rate(seconds: seconds) { raw.verify() }
            limits[fixture.name] = limit
            report.add("limit", "OpenSSL \(fixture.name) verify (pre-parsed, pre-hashed)", limit)
            let verifier = TokenVerifier(policy: fixture.verifier.policy, keySource: fixture.verifier.keySource)  // no cache
            let full = Measure.rate(seconds: seconds) { verifies(fixture, verifier) }
            single[fixture.name] = full
            report.add("tokenguard", "full verify \(fixture.name), 1 thread (\(fixture.token.utf8.count) B)", full, ratio: ("OpenSSL", full / limit))
            // The overhead and the ratio both from alternating batches of the limit and the full check, for at least 31
            // rounds: drift between two rates measured a second apart is of the size of the overhead itself.
            guard let paired = Measure.interleaved(seconds: seconds, base: { raw.verify() }, full: { verifies(fixture, verifier) }) else {
                throw RunnerError("\(fixture.name) stopped verifying while timed")
            }
            let overhead = paired.overheadNs / 1000
            overheads[fixture.name] = overhead
            pairedRatios[fixture.name] = paired.ratio
            report.add("overhead", "\(fixture.name) beyond OpenSSL's verify, interleaved (\(paired.rounds) rounds)", overhead, "µs/token")
            report.add("tokenguard", "full verify \(fixture.name) ÷ OpenSSL's verify, interleaved", paired.ratio, "×")
            // What of the overhead is hashing the signing input, which the limit is handed done (Ed25519's limit hashes
            // for itself): the part no parsing or claim check can save.
            var hashing = ""
            if fixture.name != "EdDSA" {
                let hashNs = 1e9 / Measure.rate(seconds: seconds) { raw.hashSigningInput() }
                report.add(
                    "overhead", "of which SHA-256 of the \(fixture.name) signing input (\(raw.signingInputCount) B)", hashNs / 1000, "µs/token")
                hashing = String(format: ", of which %.2f hashing the %d-byte signing input (SHA-256, EVP)", hashNs / 1000, raw.signingInputCount)
            }
            report.notes.append(
                String(
                    format:
                        "%@: %.2f µs per token beyond OpenSSL's verify (hashing the signing input, parsing, claims, nonce)%@; "
                        + "quartiles %.2f–%.2f over %d alternating rounds; %.2f from the two rates",
                    fixture.name, overhead, hashing, paired.lowerQuartileNs / 1000, paired.upperQuartileNs / 1000, paired.rounds,
                    1e6 / full - 1e6 / limit))
        }
        let cores = ProcessInfo.processInfo.activeProcessorCount
        var multi: [String: Double] = [:]
        for fixture in fixtures {
            let verifier = TokenVerifier(policy: fixture.verifier.policy, keySource: fixture.verifier.keySource)
            let rate = Measure.parallelRate(threads: cores, seconds: seconds) {
                // This thread's own copies of the token and nonce.
                let token = String(decoding: Array(fixture.token.utf8), as: UTF8.self)
                let nonce = String(decoding: Array(fixture.nonce.utf8), as: UTF8.self)
                return {
                    if case .success = verifier.verify(token: token, nonce: nonce, at: fixture.now) { return true }
                    return false
                }
            }
            multi[fixture.name] = rate
            report.add("tokenguard", "full verify \(fixture.name), \(cores) threads", rate, ratio: ("1 thread", rate / (single[fixture.name] ?? 1)))
        }

        // Peers on the same tokens.
        var jwtkit: [String: Double] = [:]
        #if TOKENGUARD_BENCH_PEERS
            for fixture in fixtures {
                let peer = try await JWTKitPeer(fixture: fixture)
                let rate = await Measure.rateAsync(seconds: seconds) { await peer.verify() }
                jwtkit[fixture.name] = rate
                report.add("peer", "jwt-kit 5 verify \(fixture.name)", rate, ratio: ("tokenguard/jwt-kit", (single[fixture.name] ?? 0) / rate))
            }
        #else
            report.notes.append(Self.peersLeftOut)
        #endif
        var libjwtRS256 = 0.0
        for fixture in fixtures where fixture.name == "RS256" || fixture.name == "ES256" {
            let reference = LibJWTReference(publicKeyPEM: try fixture.key.signingKey.publicKeyPEM())
            let rate = Measure.rate(seconds: seconds) { reference.accepts(fixture.token) }
            if fixture.name == "RS256" { libjwtRS256 = rate }
            report.add("peer", "libjwt jwt_decode \(fixture.name)", rate, ratio: ("tokenguard/libjwt", (single[fixture.name] ?? 0) / rate))
        }

        // The verified-token cache.
        let rsa = fixtures[0]
        let cached = TokenVerifier(policy: rsa.verifier.policy, keySource: rsa.verifier.keySource, cache: VerifiedTokenCache())
        let hits = Measure.rate(seconds: seconds) { verifies(rsa, cached) }
        report.add("cache", "verified-token cache hits RS256, 1 thread", hits)

        // Revocations on the hot path: the in-memory lookup every verdict goes through, with 100,000 records held.
        let revocations = RevocationSet(
            (0..<100_000).map { Revocation(provider: "apple", subject: "revoked-\($0)", notBefore: rsa.now) })
        guard case .success(let cachedVerdict) = cached.verify(token: rsa.token, nonce: rsa.nonce, at: rsa.now) else {
            throw RunnerError("the cached verifier does not verify")
        }
        let lookups = Measure.rate(seconds: seconds) { revocations.check(cachedVerdict) == nil }
        report.add("revoke", "revocation check per verdict (100,000 revocations held)", 1e9 / lookups, "ns")

        // Replay protection's cost: a full verification then a claim of a fresh key, per call.
        let plain = TokenVerifier(policy: rsa.verifier.policy, keySource: rsa.verifier.keySource)
        var counter = 0
        func withReplay(_ store: any ReplayStore) async -> Double {
            await Measure.rateAsync(seconds: seconds) {
                counter += 1
                guard verifies(rsa, plain) else { return false }
                return (try? await store.claim(keys: ["bench-\(counter)"], expiresAt: rsa.now + 86_400).get()) == true
            }
        }
        report.add(
            "replay", "verify RS256 + replay claim, memory store", await withReplay(MemoryReplayStore(capacity: 10_000_000)),
            ratio: ("replay off", 1))
        if let last = report.measurements.last, let off = single["RS256"] {
            report.measurements[report.measurements.count - 1].ratio = ("replay off", last.value / off)
        }
        if let redis = try? RedisServerProcess(), let store = try? RedisReplayStore(url: redis.url) {
            let rate = await withReplay(store)
            report.add("replay", "verify RS256 + replay claim, Redis on loopback", rate, ratio: ("replay off", rate / (single["RS256"] ?? 1)))
            redis.stop()
        } else {
            report.notes.append("replay with Redis: skipped (redis-server not installed)")
        }

        // Rejections.
        let malformed = Self.malformedTokens(rsa.token)
        var index = 0
        let rejections = Measure.rate(seconds: seconds) {
            index = (index + 1) % malformed.count
            if case .failure = rsa.verifier.verify(token: malformed[index], nonce: rsa.nonce, at: rsa.now) { return true }
            return false
        }
        report.add("reject", "malformed tokens, 1 thread", rejections)
        let unknownKid = try rsa.key.sign(ProviderTokens.apple(now: rsa.now, rawNonce: rsa.nonce), keyID: "not-published")
        let unknown = Measure.rate(seconds: seconds) {
            if case .failure = rsa.verifier.verify(token: unknownKid, nonce: rsa.nonce, at: rsa.now) { return true }
            return false
        }
        report.add("reject", "unknown kid (no fetch), 1 thread", unknown)
        let parts = segments(rsa.token)
        var badSignature = Array(parts[2].utf8)
        badSignature[10] = badSignature[10] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let forged = "\(parts[0]).\(parts[1]).\(String(decoding: badSignature, as: UTF8.self))"
        let bad = Measure.rate(seconds: seconds) {
            if case .failure = rsa.verifier.verify(token: forged, nonce: rsa.nonce, at: rsa.now) { return true }
            return false
        }
        report.add("reject", "bad signature RS256, 1 thread", bad)

        // HTTP.
        let httpRuns = try await HTTPLoad.run(fixture: rsa, seconds: quick ? 1 : 5)
        var p99AtHalf = Double.nan
        var maxima: [String: Double] = [:]
        var oneConnectionP50: [String: Double] = [:]
        var ratiosToFloor: [String: Double] = [:]
        for http in httpRuns {
            report.add("http", "\(http.label), max (16 conns, \(http.generator))", http.maximumPerSecond)
            maxima[http.label] = http.maximumPerSecond
            if !http.ratiosToFloor.isEmpty {
                let sorted = http.ratiosToFloor.sorted()
                ratiosToFloor[http.label] = sorted[sorted.count / 2]
                report.add(
                    "http", "\(http.label), ÷ /healthz on the same server (median of \(sorted.count) paired 1 s runs)", sorted[sorted.count / 2], "×")
                let rounds = http.ratiosToFloor.map { String(format: "%.2f", $0) }.joined(separator: " ")
                report.notes.append("\(http.label) ÷ /healthz, paired 1 s runs on one server: \(rounds)")
            }
            if !http.ratiosToComparison.isEmpty {
                let rounds = http.ratiosToComparison.map { String(format: "%.2f", $0) }.joined(separator: " ")
                report.notes.append("\(http.label) ÷ POST /v1/verify, paired 1 s runs on one server: \(rounds)")
            }
            if let one = http.oneConnection {
                oneConnectionP50[http.label] = one.p50
                report.add("http", "\(http.label), 1 conn p50", one.p50 * 1000, "µs")
                report.add("http", "\(http.label), 1 conn p99", one.p99 * 1000, "µs")
            }
            if http.failures > 0 { report.notes.append("\(http.label): \(http.failures) answers were not 2xx (wrk or the open-loop generator)") }
            for (fraction, achieved, p50, p99, p999) in http.latency {
                let label = "\(http.label), \(Int(fraction * 100))% load (\(Int(achieved))/s)"
                report.add("http", "\(label) p50", p50, "ms")
                report.add("http", "\(label) p99", p99, "ms")
                report.add("http", "\(label) p99.9", p999, "ms")
                // A scenario with refused answers measures no verdict's latency: the target is then left unmeasured.
                if fraction == 0.5 && http.label.hasPrefix("POST /v1/verify RS256, full") && http.failures == 0 { p99AtHalf = p99 }
            }
        }
        if HTTPLoad.wrk == nil { report.notes.append("wrk is not installed: maxima are from the bench's own libcurl client") }
        func ratio(_ a: Double?, _ b: Double?) -> Double { (a ?? 0) / max(b ?? 1, 1e-9) }
        func httpRate(_ prefix: String) -> Double? { maxima.first { $0.key.hasPrefix(prefix) }?.value }
        func oneConnection(_ prefix: String) -> Double? { oneConnectionP50.first { $0.key.hasPrefix(prefix) }?.value }
        // A request's rate over the floor: paired on one server when measured so, else from the two maxima.
        func overFloor(_ prefix: String) -> Double {
            ratiosToFloor.first { $0.key.hasPrefix(prefix) }?.value ?? ratio(httpRate(prefix), httpRate("GET /healthz"))
        }
        // What the full verification's ratio to the floor could be on this machine if answering a verify request cost
        // nothing beyond a /healthz answer and the in-process verification.
        if let floor = httpRate("GET /healthz"), let verify = single["RS256"], floor > 0, verify > 0 {
            let ceiling = (1 / floor) / (1 / floor + 1 / verify)
            report.add("http", "POST /v1/verify RS256, full ÷ /healthz if nothing but the verification were added", ceiling, "×")
            report.notes.append(
                String(
                    format: "http_full_vs_floor's ceiling here: a /healthz answer costs %.1f µs of the server's core, a full RS256 "
                        + "verification %.1f µs in process, so a verify request answered for nothing more would be %.2f of the floor",
                    1e6 / floor, 1e6 / verify, ceiling))
        }

        // Batch: the batch pipeline in a child process over a generated log; peak memory at two sizes.
        let (small, large) = quick ? (20_000, 200_000) : (200_000, 2_000_000)
        let batch = try BatchBench(fixture: rsa)
        let first = try batch.run(lines: small)
        let second = try batch.run(lines: large)
        report.add("batch", "tokenguard batch, \(small) lines", first.perSecond)
        report.add("batch", "tokenguard batch, \(small) lines, peak RSS", first.peakMiB, "MiB")
        report.add("batch", "tokenguard batch, \(large) lines", second.perSecond)
        report.add("batch", "tokenguard batch, \(large) lines, peak RSS", second.peakMiB, "MiB")
        // The batch over the in-process rate, each batch run paired with an in-process run right after it: the two
        // rates measured minutes apart gave 0.71 to 0.91 for one build as the machine's load came and went.
        var batchRatios: [Double] = []
        let rsaVerifier = TokenVerifier(policy: rsa.verifier.policy, keySource: rsa.verifier.keySource)
        for _ in 0..<3 {
            let batchRate = try batch.run(lines: quick ? 64_000 : 256_000).perSecond
            let inProcess = Measure.parallelRate(threads: cores, seconds: quick ? 0.7 : 2) {
                let token = String(decoding: Array(rsa.token.utf8), as: UTF8.self)
                let nonce = String(decoding: Array(rsa.nonce.utf8), as: UTF8.self)
                return {
                    if case .success = rsaVerifier.verify(token: token, nonce: nonce, at: rsa.now) { return true }
                    return false
                }
            }
            if inProcess > 0 { batchRatios.append(batchRate / inProcess) }
        }
        let batchVsInProcess = batchRatios.isEmpty ? 0 : batchRatios.sorted()[batchRatios.count / 2]
        report.add("batch", "tokenguard batch ÷ in-process RS256 on \(cores) threads (median of 3 paired runs)", batchVsInProcess, "×")
        report.notes.append("batch ÷ in-process RS256, paired runs: " + batchRatios.map { String(format: "%.2f", $0) }.joined(separator: " "))

        // Targets (reported, never asserted).
        for (name, goal) in [("RS256", 0.88), ("PS256", 0.85), ("ES256", 0.9), ("EdDSA", 0.9)] {
            report.target(
                "\(name.lowercased())_vs_openssl", pairedRatios[name] ?? ratio(single[name], limits[name]), goal,
                note: "alternating batches with OpenSSL's verify")
        }
        for (name, goal) in [("RS256", 1.5), ("PS256", 1.5), ("ES256", 1.1), ("EdDSA", 0.95)] {
            let key = "\(name.lowercased())_vs_jwtkit"
            if let peer = jwtkit[name] {
                report.target(key, ratio(single[name], peer), goal)
            } else {
                report.unmeasured(key, goal, reason: Self.peersLeftOut)
            }
        }
        report.target("rs256_vs_libjwt", ratio(single["RS256"], libjwtRS256), 5)
        report.target("cache_hits_per_core", hits, 3_000_000)
        report.target("revocation_check_ns", 1e9 / lookups, 1000, higherIsBetter: false, note: "the in-memory lookup per verdict")
        report.target("malformed_rejections_per_core", rejections, 4_000_000)
        report.target("two_core_scaling", ratio(multi["RS256"], single["RS256"]), 1.8, note: "RS256, \(cores) threads vs 1")
        report.target("http_p99_ms_at_half_load", p99AtHalf, 1, higherIsBetter: false, note: "open-loop generator, full RS256 verify")
        report.target("http_cached_vs_floor", overFloor("POST /v1/verify RS256, cached"), 0.8, note: Self.pairedNote)
        report.target("http_full_vs_floor", overFloor("POST /v1/verify RS256, full"), 0.55, note: Self.pairedNote)
        if let peer = httpRate("Hummingbird + jwt-kit") {
            report.target("http_vs_jwtkit_server", ratio(httpRate("POST /v1/verify RS256, full"), peer), 1.2)
        } else {
            report.unmeasured("http_vs_jwtkit_server", 1.2, reason: Self.peersLeftOut)
        }
        if let verify = oneConnection("POST /v1/verify RS256, cached"), let floor = oneConnection("GET /healthz") {
            report.target(
                "http_one_conn_overhead_us", (verify - floor) * 1000, 40, higherIsBetter: false, note: "verify p50 - /healthz p50, cache on")
        }
        for name in ["RS256", "ES256", "EdDSA"] {
            guard let overhead = overheads[name] else { continue }
            report.target(
                "\(name.lowercased())_overhead_us", overhead, name == "RS256" ? 2.5 : 3.0, higherIsBetter: false,
                note: "timed in alternating batches with OpenSSL's verify")
        }
        report.target(
            "forward_auth_cached_vs_http_floor", overFloor("forward-auth RS256, cached"), 0.8,
            note: "a cached check costs little more than the HTTP round trip; \(Self.pairedNote)")
        // Both on one server in alternation (drift between two servers' runs was as large as the difference looked
        // for); without wrk, each over its own floor. The ratio of the two maxima is kept in the notes.
        let forwardAuthFull = overFloor("forward-auth RS256, full")
        let verifyFull = overFloor("POST /v1/verify RS256, full")
        let pairedOnOneServer = httpRuns.first { $0.label.hasPrefix("forward-auth RS256, full") }?.ratiosToComparison.sorted() ?? []
        report.target(
            "forward_auth_full_vs_verify_api",
            pairedOnOneServer.isEmpty ? (verifyFull > 0 ? forwardAuthFull / verifyFull : 0) : pairedOnOneServer[pairedOnOneServer.count / 2], 1.0,
            note: "same verification, no JSON body; "
                + (pairedOnOneServer.isEmpty
                    ? "each over /healthz on its own server (\(Self.pairedNote))"
                    : "median of \(pairedOnOneServer.count) paired 1 s wrk runs of both on one server"))
        report.notes.append(
            String(
                format: "forward-auth full ÷ POST /v1/verify full from the two maxima alone: %.2f",
                ratio(httpRate("forward-auth RS256, full"), httpRate("POST /v1/verify RS256, full"))))
        report.target("batch_rss_mib_200k", quick ? first.peakMiB : first.peakMiB, 64, higherIsBetter: false, note: "\(small) lines")
        report.target("batch_rss_mib_2m", second.peakMiB, 64, higherIsBetter: false, note: "\(large) lines")
        report.target(
            "batch_vs_inprocess", batchVsInProcess, 0.85,
            note: "batch tokens/s over in-process RS256 on \(cores) threads, median of 3 runs each paired with an in-process run")
        return report
    }
}

/// A generated token log streamed through a pipe into the batch child: no multi-gigabyte file on disk.
struct BatchBench {
    let block: [UInt8]
    let linesPerBlock: Int
    let config: String
    let workspace: TempWorkspace

    init(fixture: Fixture) throws {
        workspace = try TempWorkspace()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([fixture.key]))
        // The cache is off: every line pays a full verification, as a log of distinct tokens would.
        config = try workspace.write(
            "bench.yaml", "token_cache_size: 0\nproviders:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n")
        // 64 distinct tokens (different subjects), cycled.
        var text = ""
        for index in 0..<64 {
            var claims = ProviderTokens.apple(now: fixture.now, rawNonce: fixture.nonce)
            claims.set("sub", .string("001234.bench\(index).1234"))
            let token = try fixture.key.sign(claims)
            text += "{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(fixture.nonce)\",\"at\":\(fixture.now + 60)}\n"
        }
        block = Array(text.utf8)
        linesPerBlock = 64
    }

    /// The log, the config and its JWKS, written into `directory`.
    func export(to directory: String, lines: Int) throws {
        let target = URL(fileURLWithPath: directory)
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        let jwks = target.appendingPathComponent("jwks.json").path
        try FileManager.default.copyItem(atPath: workspace.url.appendingPathComponent("jwks.json").path, toPath: jwks)
        let text = try String(contentsOfFile: config, encoding: .utf8)
            .replacingOccurrences(of: workspace.url.appendingPathComponent("jwks.json").path, with: jwks)
        try text.write(toFile: target.appendingPathComponent("bench.yaml").path, atomically: true, encoding: .utf8)
        var log: [UInt8] = []
        log.reserveCapacity(block.count * (lines / linesPerBlock))
        for _ in 0..<(lines / linesPerBlock) { log += block }
        try Data(log).write(to: target.appendingPathComponent("log.ndjson"))
    }

    func run(lines: Int) throws -> (perSecond: Double, peakMiB: Double) {
        let blocks = lines / linesPerBlock
        let result = try Children.runBatch(config: config) { fd in
            for _ in 0..<blocks where !Children.writeAll(fd, block) { return }
        }
        let parts = result.report.split(separator: " ")
        guard parts.count == 2, Int(parts[0]) == blocks * linesPerBlock, Int(parts[1]) == blocks * linesPerBlock else {
            throw RunnerError("batch child reported \"\(result.report)\" for \(blocks * linesPerBlock) lines")
        }
        return (Double(blocks * linesPerBlock) / result.seconds, result.peakMiB)
    }
}
