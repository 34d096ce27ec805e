import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardRedis
import TokenGuardService
import TokenGuardTestSupport

/// Replay protection with the memory store and with a real Redis (Debian's redis-server on a port of its own).
@Suite(.serialized)
struct ReplayTests {
    let nonce = "replay-raw-nonce"

    @Test("memory store: a key is accepted once, until it expires; full means unavailable, never forgetting")
    func memoryStore() async throws {
        let clock = TestClockSeconds(1_000)
        let store = MemoryReplayStore(capacity: 3, clock: WallClock { Double(clock.now) })
        #expect(try await store.claim(keys: ["a", "n1"], expiresAt: 1_010).get() == true)
        #expect(try await store.claim(keys: ["a"], expiresAt: 1_010).get() == false, "token replayed")
        #expect(try await store.claim(keys: ["b", "n1"], expiresAt: 1_010).get() == false, "nonce reused")
        #expect(try await store.claim(keys: ["b"], expiresAt: 1_010).get() == true, "a rejected claim recorded nothing")
        guard case .failure(let full) = await store.claim(keys: ["c", "d"], expiresAt: 1_010) else {
            Issue.record("a full store must refuse")
            return
        }
        #expect(full.code == .replayStoreUnavailable)
        clock.now = 1_011
        #expect(try await store.claim(keys: ["a"], expiresAt: 1_020).get() == true, "expired entries vanish")
    }

    @Test("a token checked in its last second is claimed once, even when a twin's claim lands in the next second")
    func claimAfterTheExpirySecond() async throws {
        let key = try SharedTestKeys.rsa()
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(try SharedTestKeys.keySet([key])))
        let token = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: nonce))
        let leeway: Int64 = 60
        let lastSecond = Verifiers.now + 86_400 + leeway - 1
        // Both uses pass every check in the token's last accepted second.
        let first = verifier.verify(token: token, nonce: nonce, at: lastSecond, historical: false)
        let twin = verifier.verify(token: token, nonce: nonce, at: lastSecond, historical: false)
        #expect(first.verdict != nil && twin.verdict != nil)

        // The guard reads its clock in that second; the store reads its own a moment later, in the next.
        let storeClock = TestClockSeconds(lastSecond)
        let store = MemoryReplayStore(clock: WallClock { Double(storeClock.now) })
        let guardInLastSecond = ReplayGuard(provider: "apple", store: store, leewaySeconds: leeway, claimMarginSeconds: 16, clock: .fixed(lastSecond))
        #expect(await guardInLastSecond.check(first, provider: "apple", token: token).verdict != nil)
        for storeSecond in [lastSecond + 1, lastSecond + 16] {
            storeClock.now = storeSecond
            let again = await guardInLastSecond.check(twin, provider: "apple", token: token)
            #expect(again.code == .tokenReplayed, "store at last second + \(storeSecond - lastSecond): \(String(describing: again.code))")
        }

        // A twin whose claim is made after the token's last second (it waited for keys or a store) is refused as
        // expired, whatever the store holds.
        let emptyStore = MemoryReplayStore(clock: .fixed(lastSecond + 1))
        let lateGuard = ReplayGuard(provider: "apple", store: emptyStore, leewaySeconds: leeway, clock: .fixed(lastSecond + 1))
        #expect(await lateGuard.check(twin, provider: "apple", token: token).code == .tokenExpired)
        #expect(emptyStore.count == 0, "an expired token's claim records nothing")
    }

    @Test("redis store: atomic claim with expiry; stopped Redis is unavailable; restarted Redis recovers")
    func redisStore() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let store = try RedisReplayStore(url: redis.url, connections: 2, connectTimeoutMilliseconds: 300, commandTimeoutMilliseconds: 500)
        let now = Int64(Date().timeIntervalSince1970)
        let token = "k-\(UUID().uuidString)"
        // Expiry 10 s ahead: enough for the next three claims even on a loaded machine (2 s was not under
        // ThreadSanitizer, and 5 s was not once in CI with every suite running: the entries expired before the third).
        let expiry = now + 10
        #expect(try await store.claim(keys: [token, token + "-n"], expiresAt: expiry).get() == true)
        #expect(try await store.claim(keys: [token], expiresAt: expiry).get() == false)
        #expect(try await store.claim(keys: ["other", token + "-n"], expiresAt: expiry).get() == false)
        #expect(try await store.claim(keys: ["other"], expiresAt: now + 60).get() == true, "the refused claim set nothing")
        #expect(await store.health().ok)
        let untilExpired = Double(expiry + 1) - Date().timeIntervalSince1970
        if untilExpired > 0 { try await Task.sleep(for: .milliseconds(Int(untilExpired * 1000) + 100)) }
        #expect(try await store.claim(keys: [token], expiresAt: now + 60).get() == true, "entries vanish with the token's expiry")

        redis.stop()
        guard case .failure(let down) = await store.claim(keys: ["x-\(UUID().uuidString)"], expiresAt: now + 60) else {
            Issue.record("a stopped Redis must not accept")
            return
        }
        #expect(down.code == .replayStoreUnavailable)
        #expect(await store.health().ok == false)
        try redis.start()
        #expect(try await store.claim(keys: ["y-\(UUID().uuidString)"], expiresAt: now + 60).get() == true, "reconnects by itself")
        #expect(try await store.claim(keys: ["other"], expiresAt: now + 60).get() == true, "a restarted Redis without persistence is empty")
    }

    @Test("a claim that timed out but still ran in Redis is not a replay of itself: a paused Redis never turns a first use into token_replayed")
    func pausedRedisIsNotAReplay() async throws {
        let (redis, store) = try pausableStore(connections: 1, commandTimeoutMilliseconds: 500)
        defer { redis.stop() }  // SIGKILL ends a paused server too
        let keys = ["pause-\(UUID().uuidString)", "pause-n-\(UUID().uuidString)"]
        let expiry = Int64(Date().timeIntervalSince1970) + 60
        // The script loaded and this claim's settle sent first, so that what times out below is the claim itself.
        #expect(try await store.claim(keys: ["warm-\(UUID().uuidString)"], expiresAt: expiry).get() == true)
        try await Task.sleep(for: .milliseconds(200))
        redis.signal(SIGSTOP)
        // The first attempt times out (500 ms) but stays queued in Redis; the retry goes out while Redis is still
        // paused, and both run once it resumes.
        let claim = Task { await store.claim(keys: keys, expiresAt: expiry) }
        try await Task.sleep(for: .milliseconds(700))
        redis.signal(SIGCONT)
        switch await claim.value {
        case .success(let recorded):
            #expect(recorded, "the request's own earlier attempt must not make it a replay")
            // Accepted: the keys are now taken for everyone else.
            #expect(try await store.claim(keys: keys, expiresAt: expiry).get() == false)
        case .failure(let error):
            // Both attempts timed out (a slow machine): 503, and the claim is taken back, so the token is accepted
            // later, once, and never answered token_replayed meanwhile.
            #expect(error.code == .replayStoreUnavailable)
            var answers: [Bool] = []
            for _ in 0..<60 where !answers.contains(true) {
                if case .success(let recorded) = await store.claim(keys: keys, expiresAt: expiry) { answers.append(recorded) }
                if !answers.contains(true) { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(answers.last == true && !answers.contains(false), "\(answers)")
            #expect(try await store.claim(keys: keys, expiresAt: expiry).get() == false)
        }
    }

    @Test("a claim is pending until its owner keeps it: another claim finding it waits for it to settle or go, never answering token_replayed for it")
    func pendingClaims() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let store = try RedisReplayStore(url: redis.url, connections: 2, connectTimeoutMilliseconds: 300, commandTimeoutMilliseconds: 1000)
        let expiry = Int64(Date().timeIntervalSince1970) + 60
        let kept = "kept-\(UUID().uuidString)"
        #expect(try await store.claim(keys: [kept], expiresAt: expiry).get() == true)
        var value = ""
        for _ in 0..<50 {
            value = try redis.cli(["GET", kept]).trimmingCharacters(in: .whitespacesAndNewlines)
            if value.hasPrefix("c") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(value.hasPrefix("c"), "a kept claim is settled in the background: \(value)")

        // Another claim's pending value that does not settle in time: undecided (503), never token_replayed.
        let redisNow = try redis.cli(["TIME"]).split(separator: "\n").first.map(String.init) ?? ""
        let pendingNow = "p:elsewhere:\(redisNow)"
        let stuck = "stuck-\(UUID().uuidString)"
        _ = try redis.cli(["SET", stuck, pendingNow, "EX", "60"])
        guard case .failure(let undecided) = await store.claim(keys: [stuck], expiresAt: expiry) else {
            Issue.record("a claim pending elsewhere is neither a first use nor a replay")
            return
        }
        #expect(undecided.code == .replayStoreUnavailable)
        // Pending for longer than any owner takes to decide (its replica died): it may have been accepted, a replay.
        let orphaned = "orphaned-\(UUID().uuidString)"
        let longAgo = (Int(redisNow) ?? 0) - RedisReplayStore.pendingSettlesWithinSeconds - 1
        _ = try redis.cli(["SET", orphaned, "p:elsewhere:\(longAgo)", "EX", "60"])
        #expect(try await store.claim(keys: [orphaned], expiresAt: expiry).get() == false)
        // Dated ahead of Redis's clock (a clock stepped back): it would never age, so it counts as settled too.
        let ahead = "ahead-\(UUID().uuidString)"
        _ = try redis.cli(["SET", ahead, "p:elsewhere:\((Int(redisNow) ?? 0) + 100_000)", "EX", "60"])
        #expect(try await store.claim(keys: [ahead], expiresAt: expiry).get() == false)

        // A pending claim taken back: the waiting claim goes through. Settled instead: a replay.
        // Dated now (the waits above took seconds: an older date would age towards counting as settled).
        let pendingNowAgain = "p:elsewhere:" + (try redis.cli(["TIME"]).split(separator: "\n").first.map(String.init) ?? "")
        let released = "released-\(UUID().uuidString)"
        let settled = "settled-\(UUID().uuidString)"
        _ = try redis.cli(["SET", released, pendingNowAgain, "EX", "60"])
        _ = try redis.cli(["SET", settled, pendingNowAgain, "EX", "60"])
        async let afterRelease = store.claim(keys: [released], expiresAt: expiry)
        async let afterSettle = store.claim(keys: [settled], expiresAt: expiry)
        try await Task.sleep(for: .milliseconds(100))
        // Both in one command: the waiting claims give up after 2 s, and each redis-cli started on a loaded machine
        // (a sanitizer run) can take a good part of that.
        let decide = "redis.call('DEL', KEYS[1]); redis.call('SET', KEYS[2], 'elsewhere', 'EX', 60); return 1"
        _ = try redis.cli(["EVAL", decide, "2", released, settled])
        #expect(try await afterRelease.get() == true)
        #expect(try await afterSettle.get() == false)

        // Arguments are bytes with their length: two keys that differ only after a NUL are two keys (a C-string copy
        // would cut both at the NUL, and hiredis would read past the copy).
        #expect(try await store.claim(keys: ["nul\u{0}one"], expiresAt: expiry).get() == true)
        #expect(try await store.claim(keys: ["nul\u{0}two"], expiresAt: expiry).get() == true)

        // Claims go out as EVALSHA once the script is loaded; a Redis that lost it (SCRIPT FLUSH, a restart) still
        // answers every claim.
        #expect(try redis.cli(["INFO", "commandstats"]).contains("cmdstat_evalsha:"))
        _ = try redis.cli(["SCRIPT", "FLUSH"])
        let afterFlush = "flushed-\(UUID().uuidString)"
        #expect(try await store.claim(keys: [afterFlush], expiresAt: expiry).get() == true)
        #expect(try await store.claim(keys: [afterFlush], expiresAt: expiry).get() == false)
    }

    @Test("a claim whose request is answered while it waits for a connection is never sent (nothing to take back)")
    func cancelledClaimIsNotSent() async throws {
        let (redis, store) = try pausableStore(connections: 1, commandTimeoutMilliseconds: 5000)
        defer { redis.stop() }  // SIGKILL ends a paused server too
        let expiry = Int64(Date().timeIntervalSince1970) + 60
        #expect(try await store.claim(keys: ["warm-\(UUID().uuidString)"], expiresAt: expiry).get() == true)
        let (first, second) = ("first-\(UUID().uuidString)", "second-\(UUID().uuidString)")
        redis.signal(SIGSTOP)
        let holding = Task { await store.claim(keys: [first], expiresAt: expiry) }  // takes the only connection
        try await Task.sleep(for: .milliseconds(200))
        let waiting = Task { await store.claim(keys: [second], expiresAt: expiry) }
        try await Task.sleep(for: .milliseconds(200))
        waiting.cancel()
        redis.signal(SIGCONT)
        #expect(try await holding.value.get() == true)
        guard case .failure(let answered) = await waiting.value else {
            Issue.record("a cancelled claim must not be a verdict")
            return
        }
        #expect(answered.code == .requestTimeout)
        try await Task.sleep(for: .milliseconds(300))
        #expect(try redis.cli(["EXISTS", second]).hasPrefix("0"))
        // Sent, it would have landed and been released (an EVAL of the release script): nothing of the kind ran.
        #expect(!(try redis.cli(["INFO", "commandstats"]).contains("cmdstat_eval:")))
    }

    @Test("a batch answered at its deadline while Redis was paused, retried at once: no token_replayed for its tokens, each accepted once")
    func retryBeforeReleaseIsNotAReplay() async throws {
        let (redis, server, key, workspace) = try await serverOnPausableRedis()
        defer {
            redis.stop()  // SIGKILL ends a paused server too
            server.stop()
            _ = workspace  // its files live as long as the server
        }
        try await server.waitUntilReady()
        let items = try (0..<6).map { index in
            let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "retry-\(index)"))
            return "{\"id\":\(index),\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"retry-\(index)\"}"
        }
        let body = "{\"items\":[\(items.joined(separator: ","))]}"
        func codes(_ response: HTTPResponse) throws -> [String] {
            try (JSONParser.parseObject(response.body)["results"]?.arrayValue ?? []).map { item in
                if item.objectValue?["valid"] == .bool(true) { return "valid" }
                return item.objectValue?["error"]?.objectValue?["code"]?.stringValue ?? "?"
            }
        }
        redis.signal(SIGSTOP)
        let first = try codes(try await server.post("/v1/verify/batch", body))
        #expect(first == Array(repeating: "request_timeout", count: 6))
        // The first batch's claims wait in Redis ahead of the retry's; Redis runs them all once it resumes.
        async let retried = server.post("/v1/verify/batch", body)
        try await Task.sleep(for: .milliseconds(300))
        redis.signal(SIGCONT)
        let retry = try codes(try await retried)
        var answers = (0..<6).map { [first[$0], retry[$0]] }
        #expect(!retry.contains("token_replayed"), "the retry met our own abandoned claims: \(retry)")
        for _ in 0..<20 where answers.contains(where: { !$0.contains("valid") }) {
            try await Task.sleep(for: .milliseconds(200))
            let again = try codes(try await server.post("/v1/verify/batch", body))
            for index in 0..<6 { answers[index].append(again[index]) }
        }
        for (index, history) in answers.enumerated() {
            #expect(history.filter { $0 == "valid" }.count == 1, "item \(index): \(history)")
        }
        #expect(try codes(try await server.post("/v1/verify/batch", body)) == Array(repeating: "token_replayed", count: 6))
    }

    /// A Redis of the test's own, which it may pause (SIGSTOP), and a replay store on it.
    func pausableStore(connections: Int, commandTimeoutMilliseconds: Int) throws -> (RedisServerProcess, RedisReplayStore) {
        let redis = try RedisServerProcess()
        return (
            redis,
            try RedisReplayStore(
                url: redis.url, connections: connections, connectTimeoutMilliseconds: 300, commandTimeoutMilliseconds: commandTimeoutMilliseconds)
        )
    }

    /// A server with a 1 s request timeout whose replay store is a Redis of its own, which the test may pause; and the
    /// workspace holding its files.
    func serverOnPausableRedis() async throws -> (RedisServerProcess, ServerProcess, TestKey, TempWorkspace) {
        let redis = try RedisServerProcess()
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let config = try config(
            workspace, key: key, replay: "{ store: redis, redis_url: \"\(redis.url)\" }", extra: "server: { request_timeout_seconds: 1 }")
        do {
            return (redis, try await ServerProcess(arguments: ["--config", config], workspace: workspace), key, workspace)
        } catch {
            redis.stop()
            throw error
        }
    }

    func config(_ workspace: TempWorkspace, key: TestKey, replay: String, extra: String = "") throws -> String {
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        return try workspace.write(
            "tokenguard-\(UUID().uuidString).yaml",
            """
            replay: \(replay)
            \(extra)
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
            """)
    }

    @Test("two servers sharing one Redis accept 1,000 concurrent submissions of one token exactly once")
    func fleetExactlyOnce() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let config = try config(workspace, key: key, replay: "{ store: redis, redis_url: \"\(redis.url)\" }")
        let first = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        let second = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer {
            first.stop()
            second.stop()
        }
        try await first.waitUntilReady()
        try await second.waitUntilReady()
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: nonce))
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}"
        let statuses = await withTaskGroup(of: Int.self) { group in
            for index in 0..<1000 {
                let server = index % 2 == 0 ? first : second
                group.addTask { (try? await server.post("/v1/verify", body))?.status ?? 0 }
            }
            var all: [Int] = []
            for await status in group { all.append(status) }
            return all
        }
        // A 503 (the store busy with a thousand claims at once) is no verdict: the client sends again, as a client would.
        var finals: [Int] = []
        for status in statuses {
            var final = status
            for _ in 0..<5 where final == 503 || final == 0 { final = (try? await first.post("/v1/verify", body))?.status ?? 0 }
            finals.append(final)
        }
        #expect(finals.filter { $0 == 200 }.count == 1, "accepted exactly once (first answers: \(statuses.filter { $0 != 401 }))")
        #expect(finals.filter { $0 == 401 }.count == 999, "every other submission is token_replayed")
        let replayed = try await first.post("/v1/verify", body)
        #expect(try JSONParser.parseObject(replayed.body)["error"]?.objectValue?["code"] == .string("token_replayed"))
        // The same nonce in a second token is caught too.
        var claims = ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: nonce)
        claims.set("sub", .string("someone.else"))
        let sameNonce = try await second.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(try key.sign(claims))\",\"nonce\":\"\(nonce)\"}")
        #expect(sameNonce.status == 401)
        // A rejected token never consumes an entry: a wrong nonce first, then the right one, is accepted.
        let fresh = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "fresh-nonce"))
        #expect(try await first.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(fresh)\",\"nonce\":\"wrong\"}").status == 401)
        #expect(try await first.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(fresh)\",\"nonce\":\"fresh-nonce\"}").status == 200)
    }

    @Test("a claim answered 503 while Redis was paused is released when Redis wakes: the token is accepted later, once")
    func pausedClaimIsReleased() async throws {
        let (redis, store) = try pausableStore(connections: 2, commandTimeoutMilliseconds: 300)
        defer { redis.stop() }  // SIGKILL ends a paused server too
        let now = Int64(Date().timeIntervalSince1970)
        #expect(try await store.claim(keys: ["warm-\(UUID().uuidString)"], expiresAt: now + 60).get() == true)
        let token = "paused-\(UUID().uuidString)"
        redis.signal(SIGSTOP)
        guard case .failure(let paused) = await store.claim(keys: [token, token + "-n"], expiresAt: now + 60) else {
            Issue.record("a paused Redis must not accept")
            return
        }
        #expect(paused.code == .replayStoreUnavailable)
        // Redis wakes and runs the claim that timed out; the store takes it back, and the sign-in goes through on retry.
        redis.signal(SIGCONT)
        var accepted = 0
        var replayed = 0
        for _ in 0..<60 where accepted == 0 {
            switch await store.claim(keys: [token, token + "-n"], expiresAt: now + 60) {
            case .success(true): accepted += 1
            case .success(false): replayed += 1
            case .failure: break
            }
            if accepted == 0 { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(accepted == 1, "never accepted after the pause (\(replayed) answers token_replayed)")
        #expect(try await store.claim(keys: [token], expiresAt: now + 60).get() == false, "and only once")
    }

    @Test("a request that timed out while its claim waited on a paused Redis does not burn the token")
    func timedOutClaimIsReleased() async throws {
        let (redis, server, key, workspace) = try await serverOnPausableRedis()
        defer {
            redis.stop()  // SIGKILL ends a paused server too
            server.stop()
            _ = workspace  // its files live as long as the server
        }
        try await server.waitUntilReady()
        let warm = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "warm"))
        #expect(try await server.post("/v1/verify", "{\"provider\":\"apple\",\"token\":\"\(warm)\",\"nonce\":\"warm\"}").status == 200)
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "paused"))
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"paused\"}"
        redis.signal(SIGSTOP)
        let first = try await server.post("/v1/verify", body)
        #expect(first.status == 503)
        // The client retries at once, while the timed-out claim still waits on Redis ahead of the retry's.
        async let retried = server.post("/v1/verify", body)
        try await Task.sleep(for: .milliseconds(300))
        redis.signal(SIGCONT)
        var statuses = [try await retried.status]
        for _ in 0..<40 where statuses.last != 200 {
            statuses.append(try await server.post("/v1/verify", body).status)
            if statuses.last != 200 { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(statuses.last == 200, "never accepted after the timeout: \(statuses)")
        #expect(!statuses.contains(401), "a retry met the timed-out request's own claim as a replay: \(statuses)")
        #expect(try await server.post("/v1/verify", body).status == 401, "and only once")
    }

    @Test("Redis down: 503 replay_store_unavailable and nothing accepted; back up: the service recovers without a restart")
    func redisOutage() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let config = try config(workspace, key: key, replay: "{ store: redis, redis_url: \"\(redis.url)\" }")
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        redis.stop()
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "outage"))
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"outage\"}"
        let down = try await server.post("/v1/verify", body)
        #expect(down.status == 503)
        #expect(down.header("retry-after") != nil)
        #expect(try JSONParser.parseObject(down.body)["error"]?.objectValue?["code"] == .string("replay_store_unavailable"))
        #expect(try await server.get("/readyz").status == 503)
        try redis.start()
        #expect(try await server.post("/v1/verify", body).status == 200, "accepted once Redis is back")
        #expect(try await server.post("/v1/verify", body).status == 401, "and only once")
        #expect(try await server.get("/readyz").status == 200)
    }

    @Test("memory store through the server: a replay is caught")
    func memoryThroughServer() async throws {
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let config = try config(workspace, key: key, replay: "{ store: memory }")
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        // Until the revocation store has been read once every verdict is 503 (fail closed): ready first.
        try await server.waitUntilReady()
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: nonce))
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"\(nonce)\"}"
        let first = try await server.post("/v1/verify", body)
        let second = try await server.post("/v1/verify", body)
        #expect(first.status == 200, "\(first.status) \(String(decoding: first.body, as: UTF8.self).prefix(200))")
        #expect(second.status == 401, "\(second.status) \(String(decoding: second.body, as: UTF8.self).prefix(200))")
    }
}

/// A settable clock for store tests.
final class TestClockSeconds: @unchecked Sendable {
    // @unchecked Sendable: set only between awaited calls of one test.
    var now: Int64
    init(_ now: Int64) { self.now = now }
}
