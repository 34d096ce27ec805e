// tokenguard's benchmark: `swift run -c release bench [--quick] [--json FILE]`.
//
// In one run, on identical tokens: the raw OpenSSL verify rate (the limit); tokenguard's full verification per
// algorithm on one thread and on every core; jwt-kit and libjwt on the same tokens; verified-token cache hits;
// rejection costs; the real HTTP server under load; the batch pipeline's throughput and peak memory.
// Targets are printed as ratios beside the figures, never asserted. `--profile ALG[-cached] [--iterations N] [--key PEM]` runs a bare
// verification loop for `perf record`; `--overhead` prints only the per-token cost beyond OpenSSL's verify. (The valgrind loop is the `leakloop` target.)
import Foundation
import TokenGuardBatch
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

let arguments = Array(CommandLine.arguments.dropFirst())
func option(_ name: String) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

do {
    if let name = option("--profile"),
        let fixture = try Fixture.named(
            name.replacingOccurrences(of: "-cached", with: "").replacingOccurrences(of: "-raw", with: ""),
            pem: try option("--key").map { try String(contentsOfFile: $0, encoding: .utf8) })
    {
        // A bare verification loop for `perf record` / `perf stat` (`RS256-cached`: verified-token cache hits;
        // `RS256-raw`: OpenSSL's verify alone, the limit).
        let verifier =
            name.hasSuffix("-cached")
            ? TokenVerifier(policy: fixture.verifier.policy, keySource: fixture.verifier.keySource, cache: VerifiedTokenCache()) : fixture.verifier
        let isRaw = name.hasSuffix("-raw")
        let iterations = option("--iterations").flatMap(Int.init) ?? 200_000
        let threads = option("--threads").flatMap(Int.init) ?? 1
        let valid = Locked(0)
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            // One raw verifier per thread (its EVP_PKEY_CTX is not shared), and the thread's own token and nonce strings.
            let raw = isRaw ? try? RawOpenSSLVerifier(fixture: fixture) : nil
            let token = String(decoding: Array(fixture.token.utf8), as: UTF8.self)
            let nonce = String(decoding: Array(fixture.nonce.utf8), as: UTF8.self)
            var count = 0
            for _ in 0..<iterations {
                if let raw {
                    if raw.verify() { count += 1 }
                } else if case .success = verifier.verify(token: token, nonce: nonce, at: fixture.now) {
                    count += 1
                }
            }
            valid.withLock { $0 += count }
        }
        print("profile loop: \(valid.withLock { $0 }) valid")
    } else if arguments.contains("--profile-malformed") {
        // The bench's malformed tokens in a loop (after the well-formed token verified once, as in the bench).
        let fixture = try Fixture.named("RS256", pem: try option("--key").map { try String(contentsOfFile: $0, encoding: .utf8) })
        guard let fixture else { throw RunnerError("no RS256 fixture") }
        _ = fixture.verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now)
        let malformed = Bench.malformedTokens(fixture.token)
        var refused = 0
        for index in 0..<(option("--iterations").flatMap(Int.init) ?? 1_000_000) {
            if case .failure = fixture.verifier.verify(token: malformed[index % malformed.count], nonce: fixture.nonce, at: fixture.now) {
                refused += 1
            }
        }
        print("refused \(refused)")
    } else if let name = option("--profile-json"),
        let fixture = try Fixture.named(name, pem: try option("--key").map { try String(contentsOfFile: $0, encoding: .utf8) })
    {
        // Writing a fresh verdict's JSON (what a full verification over HTTP answers).
        let verdict = try fixture.verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now).get()
        var bytes = 0
        for _ in 0..<(option("--iterations").flatMap(Int.init) ?? 1_000_000) {
            var copy = verdict
            copy.extra = verdict.extra
            bytes &+= copy.jsonBytes.count
        }
        print("wrote \(bytes) bytes")
    } else if option("--profile-batch-line") == "RS256",
        let fixture = try Fixture.named("RS256", pem: try option("--key").map { try String(contentsOfFile: $0, encoding: .utf8) })
    {
        // One `tokenguard batch` line parsed, verified (token cache off) and answered, on one thread: minus
        // `--profile RS256` and `--profile-json RS256`, what the batch tool adds per line.
        let workspace = try TempWorkspace()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([fixture.key]))
        let config = try workspace.write(
            "bench.yaml", "token_cache_size: 0\nproviders:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n")
        let registry = VerifierRegistry(configuration: try Configuration.load(path: config))
        await registry.prepare()
        let processor = BatchProcessor(registry: registry, defaultAt: nil)
        let line = Array(
            "{\"id\":1,\"provider\":\"apple\",\"token\":\"\(fixture.token)\",\"nonce\":\"\(fixture.nonce)\",\"at\":\(fixture.now)}".utf8)
        let iterations = option("--iterations").flatMap(Int.init) ?? 100_000
        // Off the main actor, as the batch workers run: no executor hop per line.
        let valid = await Task.detached {
            var valid = 0
            for _ in 0..<iterations where await processor.process(.line(line)).code == nil { valid += 1 }
            return valid
        }.value
        print("batch lines: \(valid) valid")
    } else if option("--profile-batch-line-parse") == "RS256",
        let fixture = try Fixture.named("RS256", pem: try option("--key").map { try String(contentsOfFile: $0, encoding: .utf8) })
    {
        // Only the reading of a `tokenguard batch` line (for callgrind, which the batch workers' threads defeat).
        let line = Array(
            "{\"id\":1,\"provider\":\"apple\",\"token\":\"\(fixture.token)\",\"nonce\":\"\(fixture.nonce)\",\"at\":\(fixture.now)}".utf8)
        var read = 0
        for _ in 0..<(option("--iterations").flatMap(Int.init) ?? 1_000_000) {
            if let request = try? BatchLineRequest(line, defaultAt: nil) { read &+= request.token.utf8.count }
        }
        print("read \(read) token bytes")
    } else if let directory = option("--batch-log") {
        // The bench's batch input written out (DIR/log.ndjson, DIR/bench.yaml and its JWKS), for timing
        // `bench --batch-child DIR/bench.yaml < DIR/log.ndjson` of two builds against each other.
        let lines = arguments.last.flatMap(Int.init) ?? 256_000
        let batch = try BatchBench(fixture: try Fixture.named("RS256", pem: nil) ?? { throw RunnerError("no RS256 fixture") }())
        try batch.export(to: directory, lines: lines)
        print("wrote \(directory)/log.ndjson (\(lines / batch.linesPerBlock * batch.linesPerBlock) lines) and \(directory)/bench.yaml")
    } else if arguments.contains("--overhead") {
        // Only the per-token cost beyond OpenSSL's verify, per algorithm (for iterating on the hot loop).
        for fixture in try Fixture.all() {
            let raw = try RawOpenSSLVerifier(fixture: fixture)
            let verifier = TokenVerifier(policy: fixture.verifier.policy, keySource: fixture.verifier.keySource)
            let overhead = Measure.interleavedOverheadNs(seconds: 2) {
                raw.verify()
            } full: {
                if case .success = verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now) { return true }
                return false
            }
            // Split: the crypto layer alone (hashing the signing input, the signature's form, the pooled context) on
            // the key as tokenguard holds it, against the same raw verify.
            guard case .success(let keys) = fixture.verifier.keySource.currentKeys(), let key = keys.keys.first?.publicKey,
                let algorithm = SignatureAlgorithm(rawValue: fixture.name)
            else { throw RunnerError("no key for \(fixture.name)") }
            let parts = fixture.token.split(separator: ".")
            let message = Array("\(parts[0]).\(parts[1])".utf8)
            let signature = Base64URL.decode(String(parts[2])) ?? []
            let crypto = Measure.interleavedOverheadNs(seconds: 1) {
                raw.verify()
            } full: {
                if case .success = SignatureVerifier.verify(signature: signature, message: message, key: key, algorithm: algorithm) { return true }
                return false
            }
            print(String(format: "%@ overhead %.2f µs/token, of which the crypto layer %.2f", fixture.name, overhead / 1000, crypto / 1000))
            if arguments.contains("--pieces") {
                let bytes = Array(fixture.token.utf8)
                func ns(_ body: () -> Bool) -> Double { 1e9 / Measure.rate(seconds: 0.3, body) }
                let jws = try CompactJWS.parse(bytes, maxBytes: 16384)
                print(String(format: "  alphabet %.0f ns", ns { CompactJWSAlphabet.admits(fixture.token) }))
                print(String(format: "  Array(utf8) %.0f ns", ns { Array(fixture.token.utf8).count > 0 }))
                print(String(format: "  CompactJWS.parse %.0f ns", ns { (try? CompactJWS.parse(bytes, maxBytes: 16384)) != nil }))
                let known = VerifiedHeaders()
                known.keep(jws.header, encoded: jws.encodedHeader)
                print(
                    String(
                        format: "  CompactJWS.parse, header known %.0f ns",
                        ns { (try? CompactJWS.parse(bytes, maxBytes: 16384, knownHeaders: known)) != nil }))
                print(String(format: "  base64 payload %.0f ns", ns { Base64URL.decode(parts[1].utf8) != nil }))
                print(String(format: "  index payload %.0f ns", ns { (try? IndexedJSONObject(jws.payload)) != nil }))
                print(String(format: "  tree payload %.0f ns", ns { (try? JSONParser.parseObject(jws.payload)) != nil }))
                print(String(format: "  sha256 hex nonce %.0f ns", ns { SHA256.hexDigest(fixture.nonce.utf8).utf8.count == 64 }))
                let body = Array("{\"provider\":\"apple\",\"token\":\"\(fixture.token)\",\"nonce\":\"\(fixture.nonce)\"}".utf8)
                print(
                    String(
                        format: "  request body (tree, then VerifyRequest) %.0f ns",
                        ns { (try? VerifyRequest(try VerifyRequest.parseBody(body)))?.token.isEmpty == false }))
                print(
                    String(
                        format: "  request body (direct reader, as the server reads it) %.0f ns",
                        ns { (try? VerifyRequest.decodeBody(body))?.token.isEmpty == false }))
                let line = Array(
                    "{\"id\":1,\"provider\":\"apple\",\"token\":\"\(fixture.token)\",\"nonce\":\"\(fixture.nonce)\",\"at\":\(fixture.now)}".utf8)
                print(
                    String(
                        format: "  batch line (tree) %.0f ns",
                        ns { (try? BatchLineRequest(generally: line, defaultAt: nil))?.token.isEmpty == false }))
                print(
                    String(
                        format: "  batch line (direct reader, as the batch tool reads it) %.0f ns",
                        ns { (try? BatchLineRequest(line, defaultAt: nil))?.token.isEmpty == false }))
                print(
                    String(
                        format: "  currentKeys %.0f ns",
                        ns {
                            if case .success = fixture.verifier.keySource.currentKeys() { return true }
                            return false
                        }))
                for (index, token) in Bench.malformedTokens(fixture.token).enumerated() {
                    print(
                        String(
                            format: "  malformed rejection, shape %d %.0f ns", index,
                            ns {
                                if case .failure = fixture.verifier.verify(token: token, nonce: fixture.nonce, at: fixture.now) { return true }
                                return false
                            }))
                }
                let verdict = try fixture.verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now).get()
                print(
                    String(
                        format: "  verdict json (fresh) %.0f ns",
                        ns {
                            var copy = verdict
                            copy.extra = verdict.extra
                            return copy.jsonBytes.count > 0
                        }))
            }
        }
    } else if let config = option("--serve-child"), let port = arguments.last.flatMap(Int.init) {
        try await Children.serve(config: config, port: port)
    } else if let pem = option("--jwtkit-serve-child") {
        #if TOKENGUARD_BENCH_PEERS
            let rest = Array(arguments.drop { $0 != "--jwtkit-serve-child" }.dropFirst(2))
            guard rest.count == 4, let port = Int(rest[3]) else { throw RunnerError("--jwtkit-serve-child PEM KID ISSUER AUDIENCE PORT") }
            try await JWTKitServer.serve(pemPath: pem, keyID: rest[0], issuer: rest[1], audience: rest[2], port: port)
        #else
            throw RunnerError("this bench was built with TOKENGUARD_BENCH_PEERS=off: no jwt-kit server (\(pem))")
        #endif
    } else if arguments.contains("--open-loop-child") {
        try OpenLoop.child(arguments: Array(arguments.drop { $0 != "--open-loop-child" }.dropFirst()))
    } else if let config = option("--batch-child") {
        try await Children.batch(config: config)
    } else {
        let report = try await Bench(quick: arguments.contains("--quick")).run()
        print(report.table())
        if let path = option("--json") {
            try report.json().write(toFile: path, atomically: true, encoding: .utf8)
            print("wrote \(path)")
        }
    }
} catch {
    FileHandle.standardError.write(Data("bench: \(error)\n".utf8))
    exit(1)
}
