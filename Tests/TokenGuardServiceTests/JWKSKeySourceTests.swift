import Foundation
import Synchronization
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// Fetched keys through rotation, outages and floods, against a real HTTP server on 127.0.0.1 playing the IdP.
struct JWKSKeySourceTests {
    let nonce = "fetch-raw-nonce"

    /// A test clock that only moves when told to.
    final class TestClock: Sendable {
        private let seconds: Locked<Double>
        init(_ start: Double) { seconds = Locked(start) }
        var now: Double { seconds.withLock { $0 } }
        func advance(_ delta: Double) { seconds.withLock { $0 += delta } }
        func set(_ value: Double) { seconds.withLock { $0 = value } }
    }

    /// An IdP whose published keys and failure mode the test changes as it goes.
    final class IdP: Sendable {
        final class State: Sendable {
            let jwks: Locked<String>
            let mode = Locked<FakeHTTPServer.Response?>(nil)
            let cacheControl = Locked<String?>("max-age=3600")
            init(jwks: String) { self.jwks = Locked(jwks) }
        }

        let server: FakeHTTPServer
        let state: State

        init(keys: [TestKey]) throws {
            let state = State(jwks: try SharedTestKeys.jwks(keys))
            self.state = state
            server = try FakeHTTPServer { _ in
                if let override = state.mode.withLock({ $0 }) { return override }
                // A "\n" in the value sends it as several Cache-Control lines.
                let cacheControl = state.cacheControl.withLock { $0 }.map { $0.split(separator: "\n").map { ("Cache-Control", String($0)) } }
                return .json(state.jwks.withLock { $0 }, headers: cacheControl ?? [])
            }
        }

        var url: String { server.baseURL + "/jwks" }
        var fetches: Int { server.count("/jwks") }
        func publish(_ keys: [TestKey]) throws {
            let text = try SharedTestKeys.jwks(keys)
            state.jwks.withLock { $0 = text }
        }
        func fail(with response: FakeHTTPServer.Response?) { state.mode.withLock { $0 = response } }
        func setCacheControl(_ value: String?) { state.cacheControl.withLock { $0 = value } }
    }

    /// Ten seconds by default: the fake IdP's threads share two loaded cores with every other test (under a sanitizer
    /// too), so an answer that must succeed can take far longer than on an idle machine. A test of the timeout itself
    /// passes a short one and an IdP that answers only after twice that, so load can only make the timeout surer.
    static func client(timeoutMilliseconds: Int = 10_000) -> CurlHTTPClient {
        var configuration = CurlHTTPClient.Configuration()
        configuration.connectTimeoutMilliseconds = timeoutMilliseconds
        configuration.totalTimeoutMilliseconds = timeoutMilliseconds
        return CurlHTTPClient(configuration: configuration)
    }

    func source(
        _ idp: IdP, clock: TestClock? = nil, archive: KeyArchive? = nil, policy: KeyFetchPolicy = KeyFetchPolicy(),
        timeoutMilliseconds: Int = 10_000
    ) -> JWKSKeySource {
        let fetcher = Self.client(timeoutMilliseconds: timeoutMilliseconds)
        if let clock {
            return JWKSKeySource(
                provider: "apple", location: .jwks(idp.url), fetcher: fetcher, policy: policy, archive: archive, clock: WallClock { clock.now })
        }
        return JWKSKeySource(provider: "apple", location: .jwks(idp.url), fetcher: fetcher, policy: policy, archive: archive)
    }

    func token(_ key: TestKey, issuedAt: Int64 = Verifiers.now) throws -> String {
        try key.sign(ProviderTokens.apple(now: issuedAt, rawNonce: nonce))
    }

    func verify(_ source: JWKSKeySource, _ token: String, at: Int64 = Verifiers.now, historical: Bool = false) async -> VerificationResult {
        await TokenVerifier(policy: Verifiers.apple(), keySource: source).verifyRefreshingKeys(
            token: token, nonce: nonce, at: at, historical: historical)
    }

    @Test("a miss against older keys is answered from the keys in hand when they now hold the kid: no second fetch")
    func missAfterFetchCompleted() async throws {
        // The cold-start race (seen under ThreadSanitizer): a caller misses before the first fetch, the fetch
        // completes, then the caller asks again. Its kid is in hand now; a refetch would be waste.
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let source = source(idp)
        _ = await source.refresh()
        #expect(idp.fetches == 1)
        let answer = await source.keysAfterMiss(keyID: key.keyID)
        #expect((try? answer?.get())?.contains(keyID: key.keyID) == true)
        #expect(idp.fetches == 1)
        // A kid still unknown does refetch (once per cooldown).
        _ = await source.keysAfterMiss(keyID: "rotated-in")
        #expect(idp.fetches == 2)
    }

    @Test("cold start: the first verification fetches the keys once; 1,000 concurrent ones share that fetch")
    func coldStart() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let source = source(idp)
        #expect(source.currentKeys().isFailureWith(.keysUnavailable), "nothing fetched yet: keys_unavailable, never a rejection")
        let token = try token(key)
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<1000 { group.addTask { await verify(source, token).verdict != nil } }
            var valid = 0
            for await ok in group where ok { valid += 1 }
            return valid
        }
        #expect(results == 1000)
        #expect(idp.fetches == 1)
    }

    @Test("rotation: a new kid is accepted after one refetch; a withdrawn key's tokens are refused")
    func rotation() async throws {
        let old = try SharedTestKeys.rsa()
        let new = try SharedTestKeys.key("rsa-rotated", .rsa(bits: 2048))
        let idp = try IdP(keys: [old])
        let source = source(idp)
        #expect(await verify(source, try token(old)).verdict != nil)
        try idp.publish([old, new])
        #expect(await verify(source, try token(new)).verdict != nil, "new kid accepted after a refetch")
        #expect(idp.fetches == 2)
        try idp.publish([new])
        await source.refresh()
        #expect(await verify(source, try token(old)).code == .unknownKey, "withdrawn key no longer used for current verification")
    }

    @Test("1,000 tokens with random kids cause at most one refetch per cooldown")
    func randomKidFlood() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let source = source(idp)
        await source.refresh()
        let claims = ProviderTokens.apple(now: Verifiers.now, rawNonce: nonce)
        var tokens: [String] = []
        for index in 0..<1000 { tokens.append(try key.sign(claims, keyID: "random-\(index)-\(UInt32.random(in: 0...UInt32.max))")) }
        let codes = await withTaskGroup(of: ErrorCode?.self) { group in
            for token in tokens { group.addTask { await verify(source, token).code } }
            var all: [ErrorCode?] = []
            for await code in group { all.append(code) }
            return all
        }
        #expect(codes.allSatisfy { $0 == .unknownKey })
        #expect(idp.fetches <= 2, "initial fetch plus at most one refetch; got \(idp.fetches)")
    }

    @Test(
        "a failing IdP keeps the last good keys; with none, keys_unavailable",
        arguments: [
            ("500", FakeHTTPServer.Response(status: 500, body: Array("oops".utf8))),
            ("garbage", FakeHTTPServer.Response.json("{\"keys\": [")),
            ("no keys", FakeHTTPServer.Response.json("{\"keys\": []}")),
            ("too large", FakeHTTPServer.Response.json("{\"keys\":[],\"pad\":\"" + String(repeating: "x", count: 1_100_000) + "\"}")),
            ("slow", FakeHTTPServer.Response(body: Array("{\"keys\":[]}".utf8), delay: 4)),
        ])
    func failures(name: String, failure: FakeHTTPServer.Response) async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        // Cold, failing: keys_unavailable.
        idp.fail(with: failure)
        // The slow IdP answers after 4 s: a 2 s client times out.
        let timeout = name == "slow" ? 2_000 : 10_000
        let cold = source(idp, timeoutMilliseconds: timeout)
        #expect(await verify(cold, try token(key)).code == .keysUnavailable, "\(name)")
        #expect(cold.status.lastError != nil)
        // Warm, then failing: the last good keys stay in use.
        idp.fail(with: nil)
        let warm = source(idp, timeoutMilliseconds: timeout)
        await warm.refresh()
        idp.fail(with: failure)
        if case .success = await warm.refresh() { Issue.record("\(name): refresh should fail") }
        #expect(await verify(warm, try token(key)).verdict != nil, "\(name): last good keys kept")
        #expect(warm.status.consecutiveFailures == 1)
        // An unknown kid during the outage cannot be judged: keys_unavailable, not unknown_key.
        let rotated = try SharedTestKeys.key("rsa-rotated", .rsa(bits: 2048))
        #expect(await verify(warm, try token(rotated)).code == .keysUnavailable, "\(name)")
        // Found while writing the soak test: a second unknown kid inside the refetch cooldown got unknown_key (an outage
        // reported as a forgery). With the last attempt failed, it is keys_unavailable too, with a Retry-After.
        let second = await verify(warm, try token(rotated))
        #expect(second.code == .keysUnavailable, "\(name): within the cooldown")
        if case .failure(let error) = second { #expect((error.retryAfterSeconds ?? 0) >= 1) }
    }

    @Test("connection refused: keys_unavailable")
    func refusedThenBack() async throws {
        let key = try SharedTestKeys.rsa()
        let dead = try FakeHTTPServer()
        let url = dead.baseURL + "/jwks"
        dead.stop()
        var policy = KeyFetchPolicy()
        policy.initialBackoff = 0.05
        let source = JWKSKeySource(provider: "apple", location: .jwks(url), fetcher: Self.client(), policy: policy)
        #expect(await verify(source, try token(key)).code == .keysUnavailable)
    }

    @Test("Cache-Control max-age is honoured and clamped to [5 min, 24 h]")
    func cacheControl() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let clock = TestClock(1_767_222_000)
        for (header, expected) in [
            ("public, max-age=600", 600.0), ("max-age=5", 300), ("max-age=99999999", 86_400), (nil, 86_400), ("no-store", 300),
            ("max-age=9999999999999999999999", 86_400), ("private, max-age=\"3600\"", 3600),
            // Invalid freshness is stale (the minimum), never the longest TTL; of two, the shorter.
            ("max-age=-1", 300), ("max-age=abc", 300), ("max-age=1.5", 300), ("max-age=0x10", 300), ("max-age=", 300),
            ("max-age=+7200", 300), ("max-age=7200, max-age=600", 600), ("max-age=600, max-age=7200", 600),
            ("max-age", 300), ("max-age = 600", 600), ("max-age =600", 600), ("max-age=00000000000000000600", 600),
            ("max-age=000000000000", 300),
            // Several lines are one list (RFC 9110 §5.3): a line a CDN adds hides nothing.
            ("no-store\nmax-age=5000", 300), ("max-age=5000\nno-store", 300), ("max-age=600\nmax-age=5000", 600),
            ("max-age=5000\nprivate", 5000), ("public\nmax-age=600", 600),
            // Read as bytes: a combining mark after "," or "=" joins nothing, and a byte outside ASCII is invalid.
            ("public,\u{301}no-store", 300), ("max-age=\u{301} 20", 300), ("max-age=600, \u{1F600}", 300),
        ] {
            idp.setCacheControl(header)
            let source = source(idp, clock: clock)
            await source.refresh()
            let status = source.status
            #expect(status.expiresAt.map { $0 - (status.fetchedAt ?? 0) } == expected, "\(header ?? "none")")
        }
    }

    @Test("keys older than the maximum stale age are not used")
    func staleKeys() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let clock = TestClock(Double(Verifiers.now))
        let source = source(idp, clock: clock)
        await source.refresh()
        idp.fail(with: FakeHTTPServer.Response(status: 503))
        clock.advance(86_000)
        #expect(source.currentKeys().isSuccess)
        clock.advance(1_000)
        #expect(source.currentKeys().isFailureWith(.keysUnavailable))
        #expect(!source.status.usable)
    }

    @Test("restart during an outage: keys come from the archive until the first fetch succeeds")
    func restartFromArchive() async throws {
        let workspace = try TempWorkspace()
        let archive = try KeyArchive(path: workspace.url.appendingPathComponent("keys.sqlite").path)
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let first = source(idp, archive: archive)
        await first.refresh()
        // The archive write happens after the fetch, off the verification path; wait for it (bounded).
        for _ in 0..<100 where (try? archive.entries(provider: "apple", source: nil))?.isEmpty ?? true {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try archive.entries(provider: "apple", source: nil).count == 1)
        idp.fail(with: FakeHTTPServer.Response(status: 500))
        let restarted = source(idp, archive: try KeyArchive(path: archive.path))
        #expect(restarted.currentKeys().isSuccess, "archived keys usable at once")
        #expect(await verify(restarted, try token(key)).verdict != nil)
    }

    @Test(
        "archived keys stand in only for the source that published them: a provider re-pointed at another IdP (a dev IdP's config promoted to production) does not inherit its keys"
    )
    func archiveIsBoundToItsSource() async throws {
        let workspace = try TempWorkspace()
        let archive = try KeyArchive(path: workspace.url.appendingPathComponent("keys.sqlite").path)
        let developmentKey = try SharedTestKeys.rsa()
        let development = try IdP(keys: [developmentKey])
        let first = source(development, archive: archive)
        await first.refresh()
        for _ in 0..<100 where (try? archive.entries(provider: "apple", source: nil))?.isEmpty ?? true {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try archive.entries(provider: "apple", source: first.archiveSource).count == 1)
        // The same provider name, now pointed at another JWKS that cannot be reached (red team: the dev IdP's key
        // verified "Apple" tokens until the first fetch, or for a day during an outage, and forever at a past time).
        let production = try IdP(keys: [try SharedTestKeys.p256()])
        production.fail(with: FakeHTTPServer.Response(status: 500))
        let repointed = source(production, archive: try KeyArchive(path: archive.path))
        #expect(repointed.archiveSource != first.archiveSource)
        #expect(repointed.currentKeys().isFailureWith(.keysUnavailable), "no keys of another source stand in")
        let forged = try token(developmentKey)
        #expect(await verify(repointed, forged).code == .keysUnavailable)
        #expect(await verify(repointed, forged, historical: true).verdict == nil, "nor at a past time")
        // The original source still gets its own keys back.
        development.fail(with: FakeHTTPServer.Response(status: 500))
        let restarted = source(development, archive: try KeyArchive(path: archive.path))
        #expect(restarted.currentKeys().isSuccess)
        // Sources are told apart by every part of the location.
        let discovery = { (issuer: String, hosts: [String], dev: Bool) in
            JWKSKeySource(
                provider: "apple", location: .discovery(issuer: issuer, jwksHosts: hosts, devIdP: dev),
                fetcher: Self.client(timeoutMilliseconds: 1000)
            ).archiveSource
        }
        let sources = [
            discovery("https://idp.example", [], false), discovery("https://idp.example", ["keys.example"], false),
            discovery("https://idp.example", [], true), discovery("https://idp.example/", [], false), first.archiveSource,
        ]
        #expect(Set(sources).count == sources.count)
        // ...but jwks_hosts is a set: reordered or repeated in the config, it is the same source (red team: a
        // reordered list dropped the archive, and with it the keys an outage at start-up relies on).
        #expect(
            discovery("https://idp.example", ["b.example", "a.example"], false)
                == discovery("https://idp.example", ["a.example", "b.example", "a.example"], false))
        // A bracketed "host" holding a comma read as two hosts in the record (red team 22): only an IPv6 literal's
        // characters go between brackets, so no configured list can spell another's record.
        #expect(OutboundURL.isPlausibleHost("[::1]") && OutboundURL.isPlausibleHost("[2001:DB8::1.2.3.4]"))
        for host in ["[::1],[::2]", "[::1] dev_idp", "[]", "[::1", "[fe80::1%eth0]", "[::g]"] {
            #expect(!OutboundURL.isPlausibleHost(host), "\(host)")
        }
        let config = { (hosts: String) in
            "providers:\n  corp: {kind: oidc, issuer: \"https://idp.example\", audiences: [api], jwks_hosts: \(hosts)}\n"
        }
        _ = try Configuration.parse(yaml: config(#"["[::1]", "[::2]"]"#))
        #expect(throws: ConfigError.self) { try Configuration.parse(yaml: config(#"["[::1],[::2]"]"#)) }
    }

    @Test("the archive keeps each provider's 1,000 most recently seen key versions, however many an IdP publishes")
    func archiveIsBounded() throws {
        let workspace = try TempWorkspace()
        let archive = try KeyArchive(path: workspace.url.appendingPathComponent("keys.sqlite").path)
        let other = try KeySet.parse(jwks: Array(try SharedTestKeys.jwks([try SharedTestKeys.p256()]).utf8)).keys
        try archive.record(provider: "other", source: "jwks https://other.example/keys", keys: other, seenAt: 1_767_000_000)
        // 1,020 new Ed25519 keys, 20 per fetch, each fetch a second later.
        for fetch in 0..<51 {
            let keys = try (0..<20).map { try TestKey(.ed25519, keyID: "k\(fetch * 20 + $0)") }
            let set = try KeySet.parse(jwks: Array(try SharedTestKeys.jwks(keys).utf8))
            try archive.record(provider: "flood", source: "jwks https://flood.example/keys", keys: set.keys, seenAt: 1_767_000_000 + Int64(fetch))
        }
        let kept = Set(try archive.entries(provider: "flood", source: nil).map(\.keyID))
        #expect(kept.count == KeyArchive.maximumKeysPerProvider)
        #expect(!kept.contains("k0") && !kept.contains("k19") && kept.contains("k20") && kept.contains("k1019"), "the oldest fetch's keys go first")
        #expect(try archive.entries(provider: "other", source: nil).count == 1, "another provider's keys are untouched")
    }

    @Test("a corrupt archive file is reported and refused; verification goes on without it")
    func corruptArchive() async throws {
        let workspace = try TempWorkspace()
        let path = try workspace.write("keys.sqlite", "this is not a SQLite database, just text that is long enough to have a header")
        #expect(throws: (any Error).self) { try KeyArchive(path: path) }
    }

    @Test("verification at a past time uses a rotated-out key only for tokens issued while it was published")
    func historical() async throws {
        let workspace = try TempWorkspace()
        let archive = try KeyArchive(path: workspace.url.appendingPathComponent("keys.sqlite").path)
        let old = try SharedTestKeys.rsa()
        let new = try SharedTestKeys.key("rsa-rotated", .rsa(bits: 2048))
        let idp = try IdP(keys: [old])
        let t0 = Double(Verifiers.now)
        let clock = TestClock(t0)
        let source = source(idp, clock: clock, archive: archive)
        await source.refresh()  // old first seen at t0
        clock.set(t0 + 10 * 86_400)
        await source.refresh()  // old last seen at t0 + 10 days
        try idp.publish([new])
        clock.set(t0 + 20 * 86_400)
        await source.refresh()  // old withdrawn
        for _ in 0..<100 where (try? archive.entries(provider: "apple", source: nil).count) != 2 { try await Task.sleep(for: .milliseconds(20)) }
        // The archive is re-read after each write; give that a moment too.
        try await Task.sleep(for: .milliseconds(100))
        let issued = Int64(t0) + 5 * 86_400
        let logged = try token(old, issuedAt: issued)
        #expect(await verify(source, logged, at: issued + 60).code == .unknownKey, "current verification: only published keys")
        #expect(await verify(source, logged, at: issued + 60, historical: true).verdict != nil, "at a past time: archived key")
        let early = try token(old, issuedAt: Int64(t0) - 3_600)
        #expect(await verify(source, early, at: Int64(t0) - 3_000, historical: true).verdict != nil, "within a day before first seen")
        let afterWithdrawal = Int64(t0) + 15 * 86_400
        let late = try token(old, issuedAt: afterWithdrawal)
        #expect(await verify(source, late, at: afterWithdrawal + 60, historical: true).code == .unknownKey, "issued after the key was withdrawn")

        // One combined set per change of the keys, not one per token: a log's repeated header is parsed once.
        guard case .success(let combined) = source.historicalKeys() else {
            Issue.record("no keys for a past time")
            return
        }
        #expect(await verify(source, logged, at: issued + 60, historical: true).verdict != nil)
        #expect(await verify(source, early, at: Int64(t0) - 3_000, historical: true).verdict != nil)
        #expect((try? source.historicalKeys().get()) === combined)
        #expect(combined.verifiedHeaders.count == 1, "the logged tokens' header is kept once they verify")
        try idp.publish([new, SharedTestKeys.key("rsa-third", .rsa(bits: 2048))])
        clock.set(t0 + 21 * 86_400)
        await source.refresh()
        #expect((try? source.historicalKeys().get()).map { $0 !== combined } == true, "new keys, a new combined set")
    }

    @Test("a kid whose key material changes keeps both versions in the archive")
    func kidMaterialChange() async throws {
        let workspace = try TempWorkspace()
        let archive = try KeyArchive(path: workspace.url.appendingPathComponent("keys.sqlite").path)
        let original = try SharedTestKeys.rsa()
        let impostor = try TestKey(.rsa(bits: 2048), keyID: original.keyID)
        let idp = try IdP(keys: [original])
        let source = source(idp, archive: archive)
        await source.refresh()
        try idp.publish([impostor])
        await source.refresh()
        for _ in 0..<100 where (try? archive.entries(provider: "apple", source: nil).count) != 2 { try await Task.sleep(for: .milliseconds(20)) }
        let entries = try archive.entries(provider: "apple", source: nil)
        #expect(entries.count == 2)
        #expect(Set(entries.map(\.keyID)) == [original.keyID])
        #expect(Set(entries.map(\.thumbprint)).count == 2)
    }

    @Test("OIDC discovery: the JWKS URL comes from the issuer's document, whose issuer must match")
    func discovery() async throws {
        let key = try SharedTestKeys.p256()
        let documentIssuer = IdP.State(jwks: "")
        let server = try FakeHTTPServer { _ in .json("{}") }
        let issuer = server.baseURL
        let jwks = try SharedTestKeys.jwks([key])
        server.respond { request in
            switch request.path {
            case "/.well-known/openid-configuration":
                let named = documentIssuer.jwks.withLock { $0 }
                return .json("{\"issuer\":\"\(named.isEmpty ? issuer : named)\",\"jwks_uri\":\"\(issuer)/keys\"}")
            case "/keys": return .json(jwks)
            default: return FakeHTTPServer.Response(status: 404)
            }
        }
        let good = JWKSKeySource(provider: "corp", location: .discovery(issuer: issuer, devIdP: true), fetcher: Self.client())
        #expect(try await good.refresh().get().contains(keyID: key.keyID))
        documentIssuer.jwks.withLock { $0 = "https://evil.example" }
        let bad = JWKSKeySource(provider: "corp", location: .discovery(issuer: issuer, devIdP: true), fetcher: Self.client())
        guard case .failure(let error) = await bad.refresh() else {
            Issue.record("a discovery document naming another issuer must be refused")
            return
        }
        #expect(error.code == .keysUnavailable)
        #expect(server.count("/keys") == 1)
        // The document's issuer is quoted capped in bytes, however long the upstream made it.
        documentIssuer.jwks.withLock { $0 = "https://evil.example/" + String(repeating: "\u{301}", count: 20_000) }
        let long = JWKSKeySource(provider: "corp", location: .discovery(issuer: issuer, devIdP: true), fetcher: Self.client())
        guard case .failure(let longError) = await long.refresh() else {
            Issue.record("a discovery document naming another issuer must be refused")
            return
        }
        #expect(longError.message.contains("evil.example"))
        #expect(longError.message.utf8.count < 400, "\(longError.message.utf8.count) bytes")
    }

    /// The loop runs on a test clock that only its sleeper moves, so each fetch's moment is exact and no assertion
    /// depends on how fast a loaded machine schedules a timer (a wall-clock version of this test once saw two fetches
    /// in 42 s under a parallel sanitizer run). A fetch that fails on a loaded machine is retried and not judged.
    @Test(
        "the background loop refreshes ahead of expiry (by 5–10 % of the TTL, at most a minute), in waits of at most 5 s",
        .timeLimit(.minutes(3)))
    func backgroundRefresh() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        // The TTL announced by each successive fetch: 10 min, 2 h (the one-minute cap), 1 s, 10 min.
        let maxAges: [Double] = [600, 7200, 1, 600]
        idp.setCacheControl("max-age=600")
        let clock = TestClock(Double(Verifiers.now))
        var policy = KeyFetchPolicy()
        policy.minimumTTL = 1
        let source = source(idp, clock: clock, policy: policy)
        final class Record: Sendable {
            /// Each successful fetch's moment, and whether a failure came before it since the previous success.
            let fetches = Locked<[(at: Double, afterFailure: Bool)]>([])
            let failedSinceLast = Locked(false)
            let problems = Locked<[String]>([])
        }
        let record = Record()
        let deadline = ContinuousClock.now + .seconds(120)
        await source.runRefreshLoop { delay in
            let status = source.status
            if delay > JWKSKeySource.recheckSeconds { record.problems.withLock { $0.append("a wait of \(delay) s") } }
            if status.consecutiveFailures > 0 { record.failedSinceLast.withLock { $0 = true } }
            if let fetchedAt = status.fetchedAt, status.consecutiveFailures == 0, record.fetches.withLock({ $0.last?.at != fetchedAt }) {
                let afterFailure = record.failedSinceLast.withLock { value in
                    defer { value = false }
                    return value
                }
                let count = record.fetches.withLock { fetches in
                    fetches.append((fetchedAt, afterFailure))
                    return fetches.count
                }
                idp.setCacheControl("max-age=\(Int(maxAges[min(count, maxAges.count - 1)]))")
                if count >= 4 || ContinuousClock.now > deadline { throw CancellationError() }
            }
            clock.advance(delay)
        }
        let fetches = record.fetches.withLock { $0 }
        #expect(record.problems.withLock { $0 } == [])
        #expect(fetches.count == 4, "successful fetches: \(fetches.count)")
        var judged = 0
        for index in 1..<fetches.count where !fetches[index].afterFailure {
            let ttl = maxAges[index - 1]
            let lead = min(ttl * 0.1, 60)
            let refreshedAfter = fetches[index].at - fetches[index - 1].at
            #expect(
                refreshedAfter >= max(ttl - lead, 1) - 1e-6 && refreshedAfter <= max(ttl - lead / 2, 1) + 1e-6,
                "TTL \(ttl) s: refreshed after \(refreshedAfter) s")
            judged += 1
        }
        #expect(judged >= 2, "refreshes judged: \(judged) of \(fetches.count - 1)")
    }

    @Test("the refresh plan: no later than half the maximum stale age, never sooner than a second apart")
    func refreshPlan() throws {
        var policy = KeyFetchPolicy()
        policy.maximumStaleAge = 1000
        let source = JWKSKeySource(provider: "apple", location: .jwks("https://127.0.0.1/jwks"), fetcher: Self.client(), policy: policy)
        // A day's TTL with 1000 s of stale tolerance: refreshed at 500 s, so an outage then leaves 500 s of keys.
        #expect(source.refreshTime(fetchedAt: 10_000, ttl: 86_400, jitter: 0.5) == 10_500)
        // A TTL of 0 (no-store with a minimum TTL of 0): a second apart, not a busy loop.
        #expect(source.refreshTime(fetchedAt: 10_000, ttl: 0, jitter: 1) == 10_001)
        policy.maximumStaleAge = 0
        let noStale = JWKSKeySource(provider: "apple", location: .jwks("https://127.0.0.1/jwks"), fetcher: Self.client(), policy: policy)
        #expect(noStale.refreshTime(fetchedAt: 10_000, ttl: 3600, jitter: 0) == 10_001)
        // Otherwise ahead of expiry by 5–10 % of the TTL, at most a minute.
        let plain = JWKSKeySource(provider: "apple", location: .jwks("https://127.0.0.1/jwks"), fetcher: Self.client())
        #expect(plain.refreshTime(fetchedAt: 0, ttl: 600, jitter: 0) == 570)
        #expect(plain.refreshTime(fetchedAt: 0, ttl: 600, jitter: 1) == 540)
        #expect(plain.refreshTime(fetchedAt: 0, ttl: 7200, jitter: 1) == 7140)
    }

    @Test("retries back off up to 5 min while the keys in hand are usable, never past when they go stale; 30 s without")
    func retryDelays() throws {
        let source = JWKSKeySource(provider: "apple", location: .jwks("https://127.0.0.1/jwks"), fetcher: Self.client())
        for failures in 1...12 {
            let plain = source.retryDelay(failures: failures, usableUntil: 1_000_000, now: 0)
            let expected = min(pow(2, Double(failures - 1)), 300)
            #expect(plain >= expected * 0.9 && plain <= expected * 1.1, "\(failures): \(plain)")
            // The keys go stale in 20 s: retried then, however long the backoff (the IdP may be back, and
            // every verification would fail until the retry).
            #expect(source.retryDelay(failures: failures, usableUntil: 20, now: 0) <= 20)
            #expect(source.retryDelay(failures: failures, usableUntil: 0, now: 0) <= 1.1)
            // Nothing usable: at most 30 s (±10 %), so a recovered IdP is noticed within that.
            let none = source.retryDelay(failures: failures, usableUntil: nil, now: 0)
            #expect(none <= 33 && none >= min(expected, 27) * 0.9, "\(failures): \(none)")
        }
    }

    @Test("a failure when the keys are about to go stale is retried as they do; without usable keys within 33 s")
    func retryAtStaleness() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let clock = TestClock(1_767_222_000)
        var policy = KeyFetchPolicy()
        policy.maximumStaleAge = 60
        let source = source(idp, clock: clock, policy: policy)
        #expect(source.status.usable == false)
        await source.refresh()
        idp.fail(with: FakeHTTPServer.Response(status: 503))
        for _ in 0..<8 {
            clock.advance(5)
            await source.refresh()
        }
        // 40 s after the success with 8 failures (a 128 s backoff): retried when the keys go stale, 20 s on.
        let delay = source.nextRefreshDelay()
        #expect(delay <= 20.001 && delay >= 19.999, "\(delay)")
        clock.advance(21)
        await source.refresh()
        #expect(source.status.usable == false)
        #expect(source.nextRefreshDelay() <= 33)
    }

    @Test("while fetches fail, an unknown kid refetches no sooner than the backoff, whatever the cooldown")
    func unknownKidDuringBackoff() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let clock = TestClock(1_767_222_000)
        var policy = KeyFetchPolicy()
        policy.unknownKeyCooldown = 0
        let source = source(idp, clock: clock, policy: policy)
        #expect(await source.refresh().isSuccess)
        idp.fail(with: FakeHTTPServer.Response(status: 500))
        #expect(await source.refresh().isSuccess == false)
        let fetches = idp.fetches
        for index in 0..<50 {
            guard case .failure(let error)? = await source.keysAfterMiss(keyID: "unknown-\(index)") else {
                Issue.record("an unknown kid during an outage is keys_unavailable")
                continue
            }
            #expect(error.code == .keysUnavailable)
        }
        #expect(idp.fetches == fetches, "no fetch before the backoff's end")
        clock.advance(2)  // past the first backoff (1 s ± 10 %)
        _ = await source.keysAfterMiss(keyID: "unknown-after")
        #expect(idp.fetches == fetches + 1)
    }

    @Test("max_stale_seconds under a minute is refused: keys unusable a second after every fetch, refetched every second")
    func maximumStaleAgeRange() throws {
        for value in ["0", "1", "59", "-1"] {
            #expect(throws: ConfigError.self, "\(value)") { try Configuration.parse(yaml: "keys: { max_stale_seconds: \(value) }\n") }
        }
        #expect(try Configuration.parse(yaml: "keys: { max_stale_seconds: 60 }\n").keyFetch.maximumStaleAge == 60)
    }

    /// Fetches made for an unknown `kid` change the plan: the loop reads it again after each short wait.
    @Test("the loop follows a shorter TTL learned by another fetch, and retries another fetch's failure with backoff", .timeLimit(.minutes(3)))
    func loopFollowsOtherFetches() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        idp.setCacheControl("max-age=3600")
        let clock = TestClock(Double(Verifiers.now))
        var policy = KeyFetchPolicy()
        policy.minimumTTL = 1
        let source = source(idp, clock: clock, policy: policy)
        let step = Locked(0)
        let marks = Locked<[String: Double]>([:])
        let deadline = ContinuousClock.now + .seconds(120)
        await source.runRefreshLoop { delay in
            let fetches = idp.fetches
            switch step.withLock({ $0 }) {
            case 0 where fetches == 1:
                // After the loop's first fetch (an hour's TTL), a fetch elsewhere learns a minute's.
                idp.setCacheControl("max-age=60")
                await source.refresh()
                marks.withLock { $0["short TTL learned"] = clock.now }
                step.withLock { $0 = 1 }
            case 1 where fetches == 3:
                // The loop fetched again within that minute; now a fetch elsewhere fails.
                marks.withLock { $0["loop refetched"] = clock.now }
                idp.fail(with: FakeHTTPServer.Response(status: 500))
                await source.refresh()
                idp.fail(with: nil)
                marks.withLock { $0["failed elsewhere"] = clock.now }
                step.withLock { $0 = 2 }
                return  // no time passes: the loop plans again from the failure

            case 2 where fetches == 5:
                marks.withLock { $0["retried"] = clock.now }
                throw CancellationError()
            default:
                if ContinuousClock.now > deadline { throw CancellationError() }
            }
            clock.advance(delay)
        }
        let seen = marks.withLock { $0 }
        guard let learned = seen["short TTL learned"], let refetched = seen["loop refetched"], let failed = seen["failed elsewhere"],
            let retried = seen["retried"]
        else {
            Issue.record("steps reached: \(seen.keys.sorted()), fetches \(idp.fetches)")
            return
        }
        #expect(refetched - learned >= 54 && refetched - learned <= 57 + 1e-6, "\(refetched - learned) s after the minute's TTL")
        #expect(retried - failed >= 0.9 && retried - failed <= 1.1 + 1e-6, "retried \(retried - failed) s after the failure")
    }

    @Test("a refresh loop cancelled during a fetch that hangs returns before the fetch ends", .timeLimit(.minutes(1)))
    func refreshLoopStopsDuringFetch() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        idp.fail(with: FakeHTTPServer.Response(status: 503, delay: 20))
        let source = source(idp, timeoutMilliseconds: 60_000)
        let loop = Task { await source.runRefreshLoop() }
        let deadline = ContinuousClock.now + .seconds(30)
        while idp.fetches == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(idp.fetches == 1)
        loop.cancel()
        await loop.value  // a shutdown waits for this, not for the IdP's 20 s or the 60 s timeout
        // The fetch has not ended (its 503 would be the last error): it goes on for whatever else shares it.
        #expect(source.status.lastError == nil && source.status.consecutiveFailures == 0)
    }

    @Test("a cancelled refresh loop stops during its wait and fetches no more", .timeLimit(.minutes(2)))
    func refreshLoopStopsWhenCancelled() async throws {
        let key = try SharedTestKeys.rsa()
        let idp = try IdP(keys: [key])
        let source = source(idp)
        let waits = Locked(0)
        // The service's own sleep, for an hour, whatever the first fetch gave (a loaded machine may time it out).
        let loop = Task {
            await source.runRefreshLoop { _ in
                waits.withLock { $0 += 1 }
                try await JWKSKeySource.sleep(3600)
            }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while waits.withLock({ $0 }) == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(waits.withLock { $0 } == 1)
        let fetches = idp.fetches
        loop.cancel()
        await loop.value  // returns: the wait ends at cancellation
        #expect(waits.withLock { $0 } == 1)
        #expect(idp.fetches == fetches)
    }
}

extension Result {
    var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}

extension Result where Failure == VerificationError {
    func isFailureWith(_ code: ErrorCode) -> Bool {
        if case .failure(let error) = self { return error.code == code }
        return false
    }
}
