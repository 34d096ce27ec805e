import Foundation
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// The `redis:` block as production runs Redis: an ACL user with a password from the environment or a file, a
/// database index, one server for replay and revocations.
@Suite(.serialized)
struct RedisProductionTests {
    func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    func body(_ key: TestKey, nonce: String = "n-\(UUID().uuidString)") throws -> String {
        var claims = ProviderTokens.apple(now: now(), rawNonce: nonce)
        claims.set("sub", .string("redis-user"))
        return "{\"provider\":\"apple\",\"token\":\"\(try key.sign(claims))\",\"nonce\":\"\(nonce)\"}"
    }

    func redisCLI(_ redis: RedisServerProcess, _ arguments: [String]) throws -> String {
        try redis.cli(arguments, authentication: ["--user", "admin", "--pass", "admin-secret-5555"])
    }

    @Test("an ACL user and database index from the URL, the password from a file re-read on reconnect; never logged; wrong password fails closed")
    func aclAndDatabase() async throws {
        let redis = try RedisServerProcess(extraArguments: [
            "--user", "default", "off", "--user", "tg", "on", ">first-secret-0123", "~*", "&*", "+@all",
            "--user", "admin", "on", ">admin-secret-5555", "~*", "&*", "+@all",
        ])
        defer { redis.stop() }
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let passwordFile = try workspace.write("redis-password", "first-secret-0123\n")
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            redis: { url: "redis://tg@127.0.0.1:\(redis.port)/3", password_file: "\(passwordFile)" }
            replay: { store: redis }
            revocations: { store: redis, max_staleness_seconds: 2 }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        let first = try body(key)
        #expect(try await server.post("/v1/verify", first).status == 200)
        #expect(try await server.post("/v1/verify", first).status == 401)  // replayed, through the ACL user
        #expect(try await server.post("/v1/revocations", "{\"provider\":\"apple\",\"subject\":\"someone\"}").status == 200)
        // Everything lives in database 3.
        #expect(try redisCLI(redis, ["-n", "3", "HLEN", "tokenguard:revocations"]).contains("1"))
        #expect(try redisCLI(redis, ["-n", "0", "HLEN", "tokenguard:revocations"]).hasPrefix("0"))
        // The password changes in Redis and then in the file: a new connection picks the new one up.
        _ = try redisCLI(redis, ["ACL", "SETUSER", "tg", "resetpass", ">second-secret-4567"])
        _ = try workspace.write("redis-password", "second-secret-4567\n")
        _ = try redisCLI(redis, ["CLIENT", "KILL", "USER", "tg"])
        var recovered = false
        for _ in 0..<40 where !recovered {
            recovered = try await server.post("/v1/verify", try body(key)).status == 200
            if !recovered { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(recovered)
        // A password Redis refuses: nothing is accepted (503), never a pass.
        _ = try workspace.write("redis-password", "wrong-secret-0000\n")
        _ = try redisCLI(redis, ["CLIENT", "KILL", "USER", "tg"])
        try await Task.sleep(for: .milliseconds(1300))  // a secret file is looked at most once a second
        _ = try redisCLI(redis, ["CLIENT", "KILL", "USER", "tg"])
        let refused = try await server.post("/v1/verify", try body(key))
        #expect(refused.status == 503, "\(server.log())")
        for secret in ["first-secret-0123", "second-secret-4567", "wrong-secret-0000"] { #expect(!server.log().contains(secret)) }
        let ready = String(decoding: try await server.get("/readyz").body, as: UTF8.self)
        #expect(!ready.contains("secret"))
    }

    @Test("the redis: block refuses a password in the URL, and master_name without sentinels")
    func configRefusals() throws {
        for yaml in [
            "redis: { url: \"redis://tg:pw@127.0.0.1:6379\" }\n", "redis: { url: \"redis://127.0.0.1:6379\", master_name: m }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", sentinels: [\"127.0.0.1:26379\"] }\n", "redis: { url: \"http://x:1\" }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", password_env: TG_NOT_SET_ANYWHERE }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", password_env: TG_EMPTY }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", sentinel_password_env: TG_SET }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", sentinels: [], master_name: m }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", sentinels: [\"127.0.0.1:+26379\"], master_name: m }\n",
            "redis: { url: \"redis://127.0.0.1:6379\", password_file: /nonexistent/redis-password }\n",
            "replay: { store: redis, redis_url: \"redis://127.0.0.1:6379/2\" }\n",
            // A second spelling of the server would connect without the block's password.
            "redis: { url: \"redis://localhost:6379\", password_env: TG_SET }\nreplay: { store: redis, redis_url: \"redis://127.0.0.1:6379\" }\n",
        ] {
            #expect(throws: ConfigError.self, "\(yaml)") {
                try Configuration.parse(yaml: yaml, environment: ["TG_EMPTY": "", "TG_SET": "x"])
            }
        }
        // Every URL the config check passes is one hiredis can dial as written.
        for url in [
            "redis://tg@@127.0.0.1:6379", "redis://127.0.0.1:6379/+2", "redis://127.0.0.1:6379/-0", "redis://127.0.0.1:6379/1x", "redis://[::1:6379",
            "redis://::1:6379", "redis://127.0.0.1:+6379", "redis://127.0.0.1:0", "redis://:6379", "redis://tg@:6379", "redis://host name:6379",
            "redis://127.0.0.1:6379/1024", "redis://-host:6379", "redis://h%6Fst:6379", "redis://127.0.0.1:6379/0/1", "redis://t/g@host:1",
            "redis://[:]:16379", "redis://a..b:16379", "redis://a-:16379", "redis://999.1.1.1:16379", "redis://0x7f.1:16379", "redis://127.1:6379",
            "redis://[::1:2:3:4:5:6:7:8]:6379", "redis://.host:6379", "redis://host.:6379",
        ] {
            #expect(throws: ConfigError.self, "\(url)") { try Configuration.parse(yaml: "redis: { url: \"\(url)\" }\n", environment: [:]) }
            #expect(throws: (any Error).self, "\(url)") { try RedisURL.parse(url).get() }
        }
        let v6 = try RedisURL.parse("redis://tg@[::1]:6380/7").get()
        #expect(v6.host == "::1" && v6.port == 6380 && v6.user == "tg" && v6.database == 7)
        let named = try RedisURL.parse("redis://redis-0.redis.tokenguard.svc:6379").get()
        #expect(named.host == "redis-0.redis.tokenguard.svc" && named.database == nil && named.user == nil)
    }

    @Test("a Redis error reply that repeats the AUTH arguments reaches neither /readyz, the answers nor the log")
    func errorRepliesStayOut() async throws {
        // With AUTH renamed away, Redis answers "ERR unknown command 'AUTH', with args beginning with: 'tg' '<password>'".
        let redis = try RedisServerProcess(extraArguments: ["--rename-command", "AUTH", ""])
        defer { redis.stop() }
        let workspace = try TempWorkspace()
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let passwordFile = try workspace.write("redis-password", "echoed-secret-7777\n")
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            redis: { url: "redis://tg@127.0.0.1:\(redis.port)", password_file: "\(passwordFile)" }
            replay: { store: redis }
            revocations: { store: redis, max_staleness_seconds: 1 }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
            """)
        let server = try await ServerProcess(
            arguments: ["--config", config], environment: ["TOKENGUARD_LOG_LEVEL": "debug"], workspace: workspace)
        defer { server.stop() }
        let refused = try await server.post("/v1/verify", try body(key))
        #expect(refused.status == 503)
        try await Task.sleep(for: .milliseconds(1500))
        let ready = try await server.get("/readyz")
        let texts = [String(decoding: refused.body, as: UTF8.self), String(decoding: ready.body, as: UTF8.self), server.log()]
        for text in texts { #expect(!text.contains("echoed-secret-7777")) }
        #expect(String(decoding: ready.body, as: UTF8.self).contains("ERR"), "the error code is kept")
    }

    @Test("a password file that cannot be read, is empty or too large is a config error, never a connection without AUTH")
    func unreadablePasswordFile() async throws {
        let workspace = try TempWorkspace()
        for (name, content) in [("empty", "\n"), ("large", String(repeating: "x", count: 5000))] {
            let file = try workspace.write("pw-\(name)", content)
            let config = try workspace.write(
                "tg-\(name).yaml",
                "listen: 127.0.0.1:0\nredis: { url: \"redis://127.0.0.1:1\", password_file: \"\(file)\" }\nreplay: { store: redis }\n")
            let run = try await BinaryRunner.run(["serve", "--config", config], timeout: 20)
            #expect(run.status == 2 && run.stderr.contains("password_file"), "\(name): \(run.stderr)")
        }
    }

    /// A `redis-server --sentinel` with a config the test writes (Sentinel rewrites its config file).
    func sentinel(_ workspace: TempWorkspace, masterPort: Int) throws -> (Process, Int) {
        let port = try FreeLoopbackPort.pick()
        let config = try workspace.write(
            "sentinel-\(port).conf",
            """
            port \(port)
            bind 127.0.0.1
            sentinel monitor tg 127.0.0.1 \(masterPort) 2
            sentinel down-after-milliseconds tg 1000
            sentinel failover-timeout tg 4000
            sentinel parallel-syncs tg 1
            requirepass sentinel-secret-9876

            """)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/redis-server")
        process.arguments = [config, "--sentinel"]
        process.currentDirectoryURL = workspace.url
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return (process, port)
    }

    @Test("Sentinel: the master is killed under traffic; claims wait for a replica, nothing is accepted twice, the fleet follows the new master")
    func sentinelFailover() async throws {
        let master = try RedisServerProcess()
        defer { master.stop() }
        // Two replicas: after the failover one is still there to confirm claims, and the killed master (no
        // persistence) is never restarted — an empty node that comes back could be promoted, Redis's documented
        // data loss, which no client can undo.
        let replica = try RedisServerProcess(extraArguments: ["--replicaof", "127.0.0.1", String(master.port)])
        defer { replica.stop() }
        let replica2 = try RedisServerProcess(extraArguments: ["--replicaof", "127.0.0.1", String(master.port)])
        defer { replica2.stop() }
        let workspace = try TempWorkspace()
        var sentinels: [(Process, Int)] = []
        for _ in 0..<3 { sentinels.append(try sentinel(workspace, masterPort: master.port)) }
        defer {
            for (process, _) in sentinels where process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        // The replicas have synchronised before traffic starts (polled: a loaded machine takes longer than a fixed wait).
        for server in [replica, replica2] {
            for _ in 0..<150 {
                if try server.cli(["INFO", "replication"]).contains("master_link_status:up") { break }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let list = sentinels.map { "\"127.0.0.1:\($0.1)\"" }.joined(separator: ", ")
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            redis: { url: "redis://127.0.0.1:\(master.port)", sentinels: [\(list)], master_name: tg, sentinel_password_env: TG_SENTINEL_PASSWORD }
            replay: { store: redis }
            providers:
              apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
            """)
        let server = try await ServerProcess(
            arguments: ["--config", config], environment: ["TG_SENTINEL_PASSWORD": "sentinel-secret-9876"], workspace: workspace)
        defer { server.stop() }
        // The first claim that a replica confirms (WAIT 1); a 503 before it is the store failing closed, never a pass.
        var before = try body(key)
        var first = try await server.post("/v1/verify", before)
        for _ in 0..<50 where first.status == 503 {
            try await Task.sleep(for: .milliseconds(200))
            before = try body(key)
            first = try await server.post("/v1/verify", before)
        }
        #expect(first.status == 200, "\(String(decoding: first.body, as: UTF8.self))")

        master.signal(SIGKILL)
        // Through the failover: answers are 200 (a fresh token), 401 (a replay) or 503 (cannot decide): never a second
        // acceptance of one token.
        var accepted: [String: Int] = [:]
        var statuses: [Int: Int] = [:]
        let killedAt = Date()
        let deadline = killedAt.addingTimeInterval(25)
        var recovered = false
        while Date() < deadline && !recovered {
            // The Sentinels promote one replica and point the other at it; until then claims cannot be confirmed and
            // fail closed.
            let fresh = try body(key)
            for request in [fresh, fresh, before] {
                let status = try await server.post("/v1/verify", request).status
                statuses[status, default: 0] += 1
                if status == 200 { accepted[request, default: 0] += 1 }
            }
            recovered = accepted[fresh] == 1 && statuses[503, default: 0] > 0
            if !recovered { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(recovered, "\(statuses)")
        #expect(accepted.values.allSatisfy { $0 == 1 }, "\(statuses)")
        #expect(accepted[before] == nil, "the claim made before the failover survived it")
        // After the failover: one token sent 200 times at once is accepted exactly once.
        let once = try body(key)
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<200 { group.addTask { try await server.post("/v1/verify", once).status } }
            var all: [Int] = []
            for try await status in group { all.append(status) }
            return all
        }
        #expect(results.filter { $0 == 200 }.count == 1, "\(Dictionary(grouping: results, by: { $0 }).mapValues(\.count))")
    }

    func launch(_ executable: String, _ arguments: [String], in directory: URL) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = directory
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    func stop(_ process: Process) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    @Test("TLS to Redis through stunnel: a Redis tls-port behind a local stunnel client; a tunnel that cannot verify Redis is 503, never a pass")
    func tlsThroughStunnel() async throws {
        let stunnel = ["/usr/bin/stunnel4", "/usr/bin/stunnel"].first { FileManager.default.isExecutableFile(atPath: $0) }
        let workspace = try TempWorkspace()
        let dir = workspace.url
        for arguments in [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=redis test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "redis.key", "-out", "redis.csr", "-subj", "/CN=localhost"],
            [
                "x509", "-req", "-in", "redis.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "redis.pem", "-days", "2",
                "-extfile", "san.ext",
            ],
        ] {
            if arguments.contains("san.ext") { _ = try workspace.write("san.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\n") }
            let process = try launch("/usr/bin/openssl", arguments, in: dir)
            await process.exited()
        }
        let tlsPort = try FreeLoopbackPort.pick()
        let redis = try launch(
            "/usr/bin/redis-server",
            [
                "--port", "0", "--bind", "127.0.0.1", "--tls-port", String(tlsPort), "--tls-cert-file", "redis.pem", "--tls-key-file", "redis.key",
                "--tls-ca-cert-file", "ca.pem", "--tls-auth-clients", "no", "--save", "", "--appendonly", "no",
            ], in: dir)
        defer { stop(redis) }
        func tunnel(checkHost: String) throws -> (Process, Int) {
            let port = try FreeLoopbackPort.pick()
            let config = try workspace.write(
                "stunnel-\(port).conf",
                """
                foreground = yes
                pid =
                [redis]
                client = yes
                accept = 127.0.0.1:\(port)
                connect = 127.0.0.1:\(tlsPort)
                CAfile = \(dir.path)/ca.pem
                verifyChain = yes
                checkHost = \(checkHost)

                """)
            return (try launch(try #require(stunnel), [config], in: dir), port)
        }
        let (good, goodPort) = try tunnel(checkHost: "localhost")
        defer { stop(good) }
        let (bad, badPort) = try tunnel(checkHost: "not-the-redis.example")
        defer { stop(bad) }
        try await Task.sleep(for: .milliseconds(500))
        let key = try SharedTestKeys.rsa()
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        func server(_ port: Int) async throws -> ServerProcess {
            let config = try workspace.write(
                "tokenguard-\(port).yaml",
                """
                key_archive: "keys-\(port).sqlite"
                redis: { url: "redis://127.0.0.1:\(port)" }
                replay: { store: redis }
                providers:
                  apple: { audiences: ["\(ProviderTokens.appleAudience)"], jwks_file: "\(jwks)" }
                """)
            return try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        }
        let through = try await server(goodPort)
        defer { through.stop() }
        let once = try body(key)
        let first = try await through.post("/v1/verify", once)
        #expect(first.status == 200, "\(String(decoding: first.body, as: UTF8.self))")
        #expect(try await through.post("/v1/verify", once).status == 401)
        let refused = try await server(badPort)
        defer { refused.stop() }
        #expect(try await refused.post("/v1/verify", try body(key)).status == 503)
    }
}

/// Secrets named by `*_file` rotate without a restart.
@Suite(.serialized)
struct SecretFileTests {
    @Test("client_secret_file: the file is re-read when it changes; the new secret is used without a restart, never logged")
    func rotation() async throws {
        let expected = Locked("first-client-secret-0123")
        let calls = Locked(0)
        let github = try FakeHTTPServer { request in
            calls.withLock { $0 += 1 }
            let basic = "Basic " + Data("Iv1.abc:\(expected.withLock { $0 })".utf8).base64EncodedString()
            guard request.headers["authorization"] == basic else { return .json("{\"message\":\"Requires authentication\"}", status: 401) }
            return .json(
                "{\"id\":1,\"token\":\"x\",\"scopes\":[],\"app\":{\"client_id\":\"Iv1.abc\",\"name\":\"x\",\"url\":\"http://x\"},\"expires_at\":null,\"user\":{\"login\":\"octocat\",\"id\":583231,\"type\":\"User\"}}"
            )
        }
        defer { github.stop() }
        let workspace = try TempWorkspace()
        let secretFile = try workspace.write("github-secret", "first-client-secret-0123\n")
        let config = try workspace.write(
            "tokenguard.yaml",
            """
            providers:
              github: { client_id: "Iv1.abc", client_secret_file: "\(secretFile)", api_url: "\(github.baseURL)", dev_idp: true, cache_seconds: 0 }
            """)
        let server = try await ServerProcess(arguments: ["--config", config], workspace: workspace)
        defer { server.stop() }
        try await server.waitUntilReady()
        #expect(try await server.post("/v1/verify", "{\"provider\":\"github\",\"token\":\"gho_first\"}").status == 200)
        // GitHub now wants the new secret; until the file changes tokenguard cannot ask (503), after it it can.
        expected.withLock { $0 = "second-client-secret-4567" }
        #expect(try await server.post("/v1/verify", "{\"provider\":\"github\",\"token\":\"gho_second\"}").status == 503)
        _ = try workspace.write("github-secret", "second-client-secret-4567\n")
        var rotated = false
        for attempt in 0..<30 where !rotated {
            rotated = try await server.post("/v1/verify", "{\"provider\":\"github\",\"token\":\"gho_third\(attempt)\"}").status == 200
            if !rotated { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(rotated)
        #expect(!server.log().contains("first-client-secret") && !server.log().contains("second-client-secret"))
        #expect(throws: ConfigError.self) {
            try Configuration.parse(
                yaml: "providers:\n  github: { client_id: Iv1.abc, client_secret_file: /nonexistent/secret }\n", environment: [:])
        }
    }
}
