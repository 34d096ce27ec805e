import CHiredis
import Foundation
import Logging
import Synchronization
import TokenGuardCore
import TokenGuardService
import TokenGuardSync

/// The fleet replay store on Redis through hiredis. An atomic script sets every key only if none exists, with
/// `EXAT` expiry, so two replicas racing on one token accept it exactly once.
///
/// A fixed set of worker threads each owns one connection (the pool); blocking hiredis calls run there, never on
/// Swift's cooperative pool. Connect and command timeouts bound every call; a failed connection is dropped and
/// re-dialled on the next call, so the store recovers by itself when Redis comes back.
package final class RedisReplayStore: ReplayStore {
    package var host: String { client.host }
    package var port: Int { client.port }
    private let client: RedisClient

    /// Settles the kept claims it carries, then claims: SETs every key of the claim with EXAT, all or nothing, to the
    /// claim's *pending* value `p:<id>:<Redis time>`. Returns 1 when recorded, 0 when a key holds a settled claim (a
    /// replay), 2 when a key holds another claim still pending (undecided).
    ///
    /// A claim is pending from the moment Redis records it until its owner has decided to keep it: until then the
    /// owner may still take it back (its request was answered without it, a timeout or a batch's deadline), and a
    /// retry of that token finding it must not be told `token_replayed`. A pending key blocks every other claim exactly
    /// as a settled one does, so nothing is accepted twice while it is pending. A kept claim is settled (its keys take
    /// the bare id) by the next claim this store sends, or by a settle of its own moments later: no command of its own
    /// while claims keep coming.
    ///
    /// An owner decides within a round trip of its claim landing. A claim pending for longer than
    /// ``pendingSettlesWithinSeconds`` (by Redis's clock, from when it landed) has lost its owner — a replica killed
    /// between claim and settle — and counts as settled: its token may have been accepted, so a later claim is a replay.
    /// So does one dated more than 2 s ahead of Redis's clock (a clock stepped back, a failover to a server behind),
    /// which would otherwise never age.
    ///
    /// Each claim carries its own random id (ARGV[2]): when a command timed out but still ran in Redis (a pause, a slow
    /// fork) and is sent again, it finds its own keys and counts as recorded — a first sign-in is never answered
    /// `token_replayed` because of our own retry.
    ///
    /// KEYS: the claim's keys (ARGV[3] of them; none for a settle alone), then each carried settle's keys. ARGV: the
    /// claim's expiry, its id, its key count, then for each settle its id, expiry and key count. A settle's key that
    /// cannot be read (not a string: written by someone else) is left alone, so it cannot fail the claim carrying it.
    static let claimScript = """
        local claimed = tonumber(ARGV[3])
        local k = claimed + 1
        for a = 4, #ARGV, 3 do
          local id = ARGV[a]
          local prefix = 'p:' .. id .. ':'
          local count = tonumber(ARGV[a + 2])
          for i = k, k + count - 1 do
            local value = redis.pcall('GET', KEYS[i])
            if type(value) == 'string' and string.sub(value, 1, #prefix) == prefix then redis.call('SET', KEYS[i], id, 'EXAT', ARGV[a + 1]) end
          end
          k = k + count
        end
        if claimed == 0 then return 1 end
        local now = tonumber(redis.call('TIME')[1])
        local prefix = 'p:' .. ARGV[2] .. ':'
        local mine = 0
        local unsettled = false
        for i = 1, claimed do
          local value = redis.call('GET', KEYS[i])
          if value then
            if value == ARGV[2] or string.sub(value, 1, #prefix) == prefix then mine = mine + 1
            elseif string.sub(value, 1, 2) == 'p:' then
              local since = tonumber(string.match(value, ':(%d+)$'))
              if since and since <= now + 2 and now - since < \(pendingSettlesWithinSeconds) then unsettled = true else return 0 end
            else return 0 end
          end
        end
        if unsettled then return 2 end
        if mine == claimed then return 1 end
        for i = 1, claimed do
          redis.call('SET', KEYS[i], prefix .. now, 'EXAT', ARGV[1])
        end
        return 1
        """

    /// How long a pending claim may wait for its owner's decision before it counts as settled.
    package static let pendingSettlesWithinSeconds = 10

    /// A kept claim waiting to be settled.
    struct Settle: Sendable {
        let keys: [String]
        let claimID: String
        let expiresAt: Int64
    }

    /// The claim script's arguments after the script itself: `keys` claimed under `claimID` (none: settles only),
    /// carrying `settles`.
    static func claimArguments(keys: [String], expiresAt: Int64, claimID: String, settles: [Settle]) -> [String] {
        var arguments = [String(keys.count + settles.reduce(0) { $0 + $1.keys.count })] + keys
        for settle in settles { arguments += settle.keys }
        arguments += [String(expiresAt), claimID, String(keys.count)]
        for settle in settles { arguments += [settle.claimID, String(settle.expiresAt), String(settle.keys.count)] }
        return arguments
    }

    /// Parses `redis://host:port`.
    package convenience init(url: String, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) throws
    {
        self.init(
            endpoint: try RedisEndpoint.parse(url), connections: connections, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
            commandTimeoutMilliseconds: commandTimeoutMilliseconds)
    }

    /// With Sentinels, a claim counts only once a replica has it (`WAIT 1`): replication is asynchronous, and a claim
    /// only the old master acknowledged would vanish at a failover.
    package init(endpoint: RedisEndpoint, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) {
        client = RedisClient(
            endpoint: endpoint, connections: connections, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
            commandTimeoutMilliseconds: commandTimeoutMilliseconds)
        waitForReplica = !endpoint.sentinels.isEmpty
    }

    private let waitForReplica: Bool
    private let logger = Logger(label: "tokenguard.replay")
    /// Whether the last claim failed: the log says so once per outage (with Redis's own words, which the answer to the
    /// caller does not carry), and once when it ends.
    private let failing = Locked(false)

    private func unavailable(_ detail: String) -> VerificationError {
        if failing.withLock({ state in
            defer { state = true }
            return !state
        }) {
            logger.error(
                "the replay store cannot answer; claims fail closed (503)",
                metadata: ["redis": "\(client.endpoint.description)", "error": "\(detail)"])
        }
        return VerificationError(.replayStoreUnavailable, "the replay store cannot answer now", retryAfterSeconds: 2)
    }

    private func answered(_ accepted: Bool) -> Result<Bool, VerificationError> {
        if failing.withLock({ state in
            defer { state = false }
            return state
        }) {
            logger.notice("the replay store answers again")
        }
        return .success(accepted)
    }

    package func claim(keys: [String], expiresAt: Int64) async -> Result<Bool, VerificationError> {
        unfinished.withLock { $0.claims += 1 }
        defer { unfinished.withLock { $0.claims -= 1 } }
        var random = SystemRandomNumberGenerator()
        let claimID = "c" + String(random.next(), radix: 16) + String(random.next(), radix: 16)
        let started = RedisConnection.monotonicSeconds()
        var pause = Self.firstUnsettledPauseSeconds
        while true {
            // A request already answered (its timeout fired, or its batch closed) claims nothing: a claim nobody will
            // hear of would only make the token's next use token_replayed.
            if !ReplayClaimGates.mayStillClaim() { return .failure(Self.abandoned) }
            let carried = takeSettles()
            let reply = await send(
                Self.claimArguments(keys: keys, expiresAt: expiresAt, claimID: claimID, settles: carried), keys: keys, claimID: claimID)
            switch reply {
            case .success(.integer): break
            default: queueSettles(carried)  // maybe not run: settling twice is harmless
            }
            guard case .success(.integer(2)) = reply else { return answer(to: reply, keys: keys, claimID: claimID, expiresAt: expiresAt) }
            // Another claim on this token is pending: its owner has not yet decided to keep it or take it back (its
            // request may have been answered without it). Ask again shortly rather than guess: it settles or is
            // released within a round trip or two of Redis.
            guard RedisConnection.monotonicSeconds() - started + pause <= Self.maximumUnsettledWaitSeconds else {
                return .failure(
                    VerificationError(
                        .replayStoreUnavailable, "an earlier claim on this token is not settled yet; nothing was accepted", retryAfterSeconds: 1))
            }
            try? await Task.sleep(for: .seconds(pause))
            pause = min(pause * 2, 0.25)
        }
    }

    /// How long a claim waits for another claim on the same token to settle or go, in all; and its first pause.
    static let maximumUnsettledWaitSeconds = 2.0
    static let firstUnsettledPauseSeconds = 0.005

    /// The claim script's SHA-1 as Redis names it (`SCRIPT LOAD`), once known: a claim then sends EVALSHA and 40
    /// bytes instead of the script, which Redis would otherwise hash on every claim. A Redis without it (restarted)
    /// answers NOSCRIPT without running anything, and that claim goes out again as EVAL, which caches the script.
    private let claimScriptSHA = Locked<(sha: String?, nextLoad: Double)>((nil, 0))

    private func scriptSHA() async -> String? {
        let now = RedisConnection.monotonicSeconds()
        let (known, due) = claimScriptSHA.withLock { state -> (String?, Bool) in
            guard state.sha == nil, now >= state.nextLoad else { return (state.sha, false) }
            state.nextLoad = now + 1  // one load at a time, and not on every claim while Redis cannot answer
            return (nil, true)
        }
        guard due else { return known }
        guard case .string(let sha) = await client.command(["SCRIPT", "LOAD", Self.claimScript]), sha.utf8.count == 40,
            sha.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) })
        else { return nil }
        claimScriptSHA.withLock { $0.sha = sha }
        return sha
    }

    /// Runs the claim script with `arguments` (with `WAIT 1` behind it when `waitingForReplica`): the replies in order,
    /// stopping at the first that is not a recorded claim.
    private func evaluate(_ arguments: [String], waitingForReplica: Bool) async -> [RedisReply] {
        func run(_ command: [String]) async -> [RedisReply] {
            guard waitingForReplica else { return [await client.command(command)] }
            return await client.commands([command, ["WAIT", "1", "500"]]) { $0 == .integer(1) }
        }
        if let sha = await scriptSHA() {
            let replies = await run(["EVALSHA", sha] + arguments)
            guard case .failure(let message) = replies.first, message.hasPrefix("NOSCRIPT") else { return replies }
        }
        return await run(["EVAL", Self.claimScript] + arguments)
    }

    /// Sends the claim script (with `WAIT 1` behind it through Sentinels): Redis's reply, or why it does not count.
    private func send(_ arguments: [String], keys: [String], claimID: String) async -> Result<RedisReply, VerificationError> {
        let replies = await evaluate(arguments, waitingForReplica: waitForReplica)
        let reply = replies.first ?? .failure("no reply")
        guard waitForReplica else { return .success(reply) }
        if reply == .integer(1) {
            guard replies.count == 2, case .integer(let acknowledged) = replies[1], acknowledged >= 1 else {
                releaseInBackground(["EVAL", Self.releaseScript, String(keys.count)] + keys + [claimID])
                return .failure(unavailable("no replica confirmed the replay claim in time (WAIT 1): not counted"))
            }
        }
        return .success(reply)
    }

    /// What a claim's reply means for the verification, settling or releasing the claim.
    private func answer(to reply: Result<RedisReply, VerificationError>, keys: [String], claimID: String, expiresAt: Int64) -> Result<
        Bool, VerificationError
    > {
        func release() { releaseInBackground(["EVAL", Self.releaseScript, String(keys.count)] + keys + [claimID]) }
        switch reply {
        case .failure(let error): return .failure(error)
        case .success(.integer(1)) where !ReplayClaimGates.mayKeepClaim():
            // The request was answered while the claim waited on Redis (its timeout's 503, its batch's deadline), so
            // this claim is not an acceptance, and it is taken back. It is still pending: a retry meanwhile waits for
            // the release instead of being told token_replayed.
            release()
            return .failure(Self.abandoned)
        case .success(.integer(1)):
            queueSettles([Settle(keys: keys, claimID: claimID, expiresAt: expiresAt)])
            return answered(true)
        case .success(.integer(0)): return answered(false)
        case .success(.skipped): return .failure(Self.abandoned)  // never sent: nothing to take back
        case .success(.failure(let message)):
            release()
            return .failure(unavailable(message))
        case .success:
            release()
            return .failure(unavailable("unexpected reply to the claim script"))
        }
    }

    static let abandoned = ReplayGuard.abandoned

    /// Deletes the keys that still hold this claim's id, pending or settled. Only this claim's own keys go: another
    /// claim's id never matches.
    static let releaseScript = """
        local prefix = 'p:' .. ARGV[1] .. ':'
        for i = 1, #KEYS do
          local value = redis.call('GET', KEYS[i])
          if value and (value == ARGV[1] or string.sub(value, 1, #prefix) == prefix) then redis.call('DEL', KEYS[i]) end
        end
        return 1
        """

    /// Kept claims not yet settled, and whether a settle of their own is on its way. Bounded: past it, a kept claim
    /// stays pending, which refuses every later claim all the same (503 rather than `token_replayed`).
    private let settles = Locked((claims: [Settle](), flushing: false))
    static let maximumQueuedSettles = 10_000
    static let settlesPerCommand = 64
    /// How long kept claims wait for a claim to carry them before they are sent on their own.
    static let settleDelaySeconds = 0.002

    private func takeSettles() -> [Settle] {
        settles.withLock { state in
            guard !state.claims.isEmpty else { return [] }
            let taken = Array(state.claims.prefix(Self.settlesPerCommand))
            state.claims.removeFirst(taken.count)
            return taken
        }
    }

    private func queueSettles(_ claims: [Settle]) {
        guard !claims.isEmpty else { return }
        let startFlush = settles.withLock { state -> Bool in
            state.claims += claims.prefix(max(0, Self.maximumQueuedSettles - state.claims.count))
            defer { state.flushing = true }
            return !state.flushing
        }
        guard startFlush else { return }
        Task.detached { [self] in await flushSettles() }
    }

    /// Sends the settles no claim has carried, a moment after the first was queued; retried for about a minute while
    /// Redis cannot answer, then dropped (those claims stay pending).
    private func flushSettles() async {
        var pause = Self.settleDelaySeconds
        var failures = 0
        while true {
            if pause > 0 { try? await Task.sleep(for: .seconds(pause)) }
            let batch = settles.withLock { state -> [Settle] in
                let taken = Array(state.claims.prefix(Self.settlesPerCommand))
                state.claims.removeFirst(taken.count)
                if taken.isEmpty { state.flushing = false }
                return taken
            }
            guard !batch.isEmpty else { return }
            if case .integer = await evaluate(Self.claimArguments(keys: [], expiresAt: 0, claimID: "", settles: batch), waitingForReplica: false)
                .first
            {
                pause = 0
                failures = 0
                continue
            }
            failures += 1
            guard failures < 24 else {
                settles.withLock { state in
                    state.claims.removeAll()
                    state.flushing = false
                }
                return
            }
            settles.withLock { $0.claims.insert(contentsOf: batch, at: 0) }
            pause = min(max(pause * 2, 0.1), 5)
        }
    }

    /// Claims still waiting on Redis, and take-backs not yet sent once: what shutdown waits for (bounded).
    private let unfinished = Locked((claims: 0, releases: 0))
    static let finishWaitSeconds = 2.0

    /// At shutdown, after the last request was answered: waits (at most ``finishWaitSeconds``) for claims still waiting
    /// on Redis and for take-backs not yet sent — a claim left pending would count as settled 10 s on, and its token,
    /// never accepted, would be `token_replayed` — then settles what is queued (a kept claim left pending would answer
    /// its token's replays 503 rather than `token_replayed`). One attempt per batch: the process is ending.
    package func finish() async {
        let deadline = RedisConnection.monotonicSeconds() + Self.finishWaitSeconds
        while unfinished.withLock({ $0.claims > 0 || $0.releases > 0 }), RedisConnection.monotonicSeconds() < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        while case let batch = takeSettles(), !batch.isEmpty {
            guard
                case .integer = await evaluate(Self.claimArguments(keys: [], expiresAt: 0, claimID: "", settles: batch), waitingForReplica: false)
                    .first
            else { return }
        }
    }

    /// Releases still being tried (bounded: past it, a claim taken back stays until its token expires).
    private let backgroundPending = Locked(0)
    static let maximumBackgroundCommands = 10_000

    /// Runs a release script off the request, retried for about a minute while Redis cannot answer.
    ///
    /// A claim answered 503 was never an acceptance, but Redis may have run it anyway (a command that timed out still
    /// runs when Redis wakes; a claim no replica confirmed stays on the master): left there, it would make every later
    /// use of a token never accepted unanswerable. Redis may also run that stale claim after the first release when
    /// both wait on a paused server (it serves its connections in any order), so a release that went through is made
    /// twice more, half a second and two seconds later.
    private func releaseInBackground(_ arguments: [String]) {
        let admitted = backgroundPending.withLock { count -> Bool in
            guard count < Self.maximumBackgroundCommands else { return false }
            count += 1
            return true
        }
        guard admitted else { return }
        unfinished.withLock { $0.releases += 1 }
        Task.detached { [client, backgroundPending, unfinished] in
            defer { backgroundPending.withLock { $0 -= 1 } }
            var pause = 0.1
            var done = 0
            for _ in 0..<24 where done < 3 {
                if case .integer = await client.command(arguments) {
                    done += 1
                    if done == 1 { unfinished.withLock { $0.releases -= 1 } }
                    pause = done == 1 ? 0.5 : 2
                } else {
                    pause = min(pause * 2, 5)
                }
                if done < 3 { try? await Task.sleep(for: .seconds(pause)) }
            }
            if done == 0 { unfinished.withLock { $0.releases -= 1 } }
        }
    }

    package func health() async -> (ok: Bool, detail: String) {
        switch await client.command(["PING"]) {
        case .status("PONG"): return (true, client.endpoint.description)
        case .failure(let message): return (false, "\(client.endpoint.description): \(message)")
        default: return (false, "\(client.endpoint.description): unexpected PING reply")
        }
    }
}

/// Where and how to reach Redis (config `redis:`): the server, or the master a set of Sentinels names; the ACL user,
/// the password (read when a connection is made, so a rotated secret is picked up on the next one; never logged),
/// the database index.
package struct RedisEndpoint: Sendable {
    package var host: String
    package var port: Int
    package var user: String? = nil
    package var database: Int? = nil
    /// The password, read at each new connection; `nil` from it means it cannot be read, and no connection is made
    /// (never one without AUTH).
    package var password: (@Sendable () -> String?)? = nil
    package var sentinels: [(host: String, port: Int)] = []
    package var masterName: String? = nil
    /// Sent to each Sentinel before it is asked for the master (`requirepass` in sentinel.conf).
    package var sentinelPassword: (@Sendable () -> String?)? = nil

    package init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `redis://[user@]host:port[/db]` strictly (`RedisURL`); a password in the URL is refused.
    package static func parse(_ url: String) throws -> RedisEndpoint {
        switch RedisURL.parse(url) {
        case .failure(let error): throw RedisError("the Redis URL \(error)")
        case .success(let parsed):
            var endpoint = RedisEndpoint(host: parsed.host, port: parsed.port)
            endpoint.user = parsed.user
            endpoint.database = parsed.database
            return endpoint
        }
    }

    /// What `/readyz` and logs may show: never the password.
    package var description: String {
        sentinels.isEmpty ? "redis \(RedisURL.display(host: host, port: port))" : "redis master \(masterName ?? "?") via \(sentinels.count) sentinels"
    }
}

/// Connections to one Redis server: a fixed set of worker threads each owns one connection (the pool); blocking
/// hiredis calls run there, never on Swift's cooperative pool.
package final class RedisClient: Sendable {
    package let endpoint: RedisEndpoint
    package var host: String { endpoint.host }
    package var port: Int { endpoint.port }
    private let workers: ThreadConfinedWorkers<RedisConnection>
    private let reachability = RedisReachability()

    /// Parses `redis://host:port`.
    package convenience init(url: String, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) throws
    {
        self.init(
            endpoint: try RedisEndpoint.parse(url), connections: connections, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
            commandTimeoutMilliseconds: commandTimeoutMilliseconds)
    }

    package init(endpoint: RedisEndpoint, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) {
        self.endpoint = endpoint
        workers = ThreadConfinedWorkers(threads: connections, name: "tokenguard-redis") { [reachability] in
            RedisConnection(
                endpoint: endpoint, connectMilliseconds: connectTimeoutMilliseconds, commandMilliseconds: commandTimeoutMilliseconds,
                reachability: reachability)
        }
    }

    deinit { workers.shutdown() }

    /// A command on one of the connections; `.skipped` when the calling task was cancelled before its turn came.
    func command(_ arguments: [String]) async -> RedisReply { await workers.runUnlessCancelled(cancelled: .skipped) { $0.command(arguments) } }

    /// Commands on one connection, in order; stops at the first whose reply `proceed` refuses.
    func commands(_ list: [[String]], proceed: @escaping @Sendable (RedisReply) -> Bool) async -> [RedisReply] {
        await workers.runUnlessCancelled(cancelled: [.skipped]) { connection in
            var replies: [RedisReply] = []
            for arguments in list {
                let reply = connection.command(arguments)
                replies.append(reply)
                if !proceed(reply) { break }
            }
            return replies
        }
    }
}

package struct RedisError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// A Redis reply reduced to what the stores need.
enum RedisReply: Sendable, Equatable {
    /// The status reply `OK`, by bytes (as Strings, a KELVIN SIGN would pass for the K).
    var isOK: Bool {
        if case .status(let text) = self { return text.sameBytes(as: "OK") }
        return false
    }

    case integer(Int64)
    case status(String)
    /// A bulk string (bytes, decoded as UTF-8).
    case string(String)
    case array([RedisReply])
    case null
    case other
    case failure(String)
    /// Not sent: the caller was answered (cancelled) while the command waited for a connection.
    case skipped
}

/// Whether any connection of a pool has had an answer from Redis since a moment: a count of answers, compared with
/// its value at that moment (no clock needed).
final class RedisReachability: Sendable {
    private let answers = Atomic<UInt64>(0)
    var mark: UInt64 { answers.load(ordering: .relaxed) }
    func recordAnswer() { answers.wrappingAdd(1, ordering: .relaxed) }
    /// Whether some connection has had an answer since ``mark`` returned `mark`.
    func answered(since mark: UInt64) -> Bool { answers.load(ordering: .relaxed) != mark }
}

/// Owns one `redisContext` (one connection), dialled lazily and re-dialled after any error: to the server, or to the
/// master the Sentinels name (asked again at every dial, so a failover is followed), then AUTH and SELECT.
@safe final class RedisConnection {
    let endpoint: RedisEndpoint
    let connectTimeout: timeval
    let commandTimeout: timeval
    private let reachability: RedisReachability
    private var context: UnsafeMutablePointer<redisContext>?

    init(endpoint: RedisEndpoint, connectMilliseconds: Int, commandMilliseconds: Int, reachability: RedisReachability = RedisReachability()) {
        self.endpoint = endpoint
        self.reachability = reachability
        connectTimeout = timeval(tv_sec: connectMilliseconds / 1000, tv_usec: Int((connectMilliseconds % 1000) * 1000))
        commandTimeout = timeval(tv_sec: commandMilliseconds / 1000, tv_usec: Int((commandMilliseconds % 1000) * 1000))
    }

    deinit { drop() }

    private func drop() {
        if let context = unsafe context { unsafe redisFree(context) }
        unsafe context = nil
    }

    /// Sends a command. A pooled connection may have gone stale (Redis restarted since): on an I/O error or EOF
    /// the connection is re-dialled and the command sent once more. At worst a claim whose reply was lost is
    /// retried and answers "seen": a false replay (fail-closed), never a double acceptance.
    func command(_ arguments: [String]) -> RedisReply {
        let first = attempt(arguments)
        if case .failure = first, lastErrorWasConnection { return attempt(arguments) }
        return first
    }

    private var lastErrorWasConnection = false

    /// A connected, authenticated context on `host:port`, or why not.
    private func dial(_ host: String, _ port: Int, authenticate: Bool) -> Result<UnsafeMutablePointer<redisContext>, RedisError> {
        guard let fresh = unsafe redisConnectWithTimeout(host, Int32(port), connectTimeout) else {
            return unsafe .failure(RedisError("cannot allocate a connection"))
        }
        if unsafe fresh.pointee.err != 0 {
            let message = unsafe withUnsafePointer(to: fresh.pointee.errstr) {
                unsafe String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            unsafe redisFree(fresh)
            return unsafe .failure(RedisError(message))
        }
        _ = unsafe redisSetTimeout(fresh, commandTimeout)
        guard authenticate else { return unsafe .success(fresh) }
        if let source = endpoint.password {
            if let error = unsafe self.authenticate(fresh, user: endpoint.user, password: source) {
                unsafe redisFree(fresh)
                return unsafe .failure(error)
            }
        }
        if let database = endpoint.database {
            guard unsafe send(fresh, ["SELECT", String(database)]).isOK else {
                unsafe redisFree(fresh)
                return unsafe .failure(RedisError("cannot select database \(database)"))
            }
        }
        return unsafe .success(fresh)
    }

    /// AUTH on a fresh connection, or why not. A password that cannot be read is a failure, never a connection
    /// without AUTH.
    private func authenticate(_ context: UnsafeMutablePointer<redisContext>, user: String?, password source: @Sendable () -> String?) -> RedisError? {
        guard let password = source() else { return RedisError("the Redis password cannot be read") }
        let reply = unsafe send(context, (user.map { ["AUTH", $0] } ?? ["AUTH"]) + [password])
        guard reply.isOK else {
            // The reply names no secret ("WRONGPASS invalid username-password pair").
            if case .failure(let message) = reply { return RedisError("authentication failed: \(message)") }
            return RedisError("authentication failed")
        }
        return nil
    }

    /// The master's address from the first Sentinel that knows it.
    private func masterAddress() -> Result<(String, Int), RedisError> {
        guard let name = endpoint.masterName else { return .failure(RedisError("sentinels need master_name")) }
        for sentinel in endpoint.sentinels {
            guard case .success(let context) = unsafe dial(sentinel.host, sentinel.port, authenticate: false) else { continue }
            defer { unsafe redisFree(context) }
            if let source = endpoint.sentinelPassword, unsafe authenticate(context, user: nil, password: source) != nil { continue }
            if case .array(let parts) = unsafe send(context, ["SENTINEL", "get-master-addr-by-name", name]), parts.count == 2,
                case .string(let host) = parts[0], case .string(let portText) = parts[1], let port = Int(portText), (1...65535).contains(port)
            {
                return .success((host, port))
            }
        }
        return .failure(RedisError("no sentinel names a master for \(name)"))
    }

    /// After a dial that failed slowly (a connect timeout: packets silently dropped), no new one before this
    /// (monotonic seconds): meanwhile a request fails at once instead of each waiting out the timeout in turn. A
    /// refused connection fails fast by itself and pauses nothing, so a restarted Redis is used at once. The pause
    /// ends early once any connection of the pool has had an answer since it began: Redis is reachable again, and a
    /// request must not fail for the pause of the connection it happened to land on.
    private var noDialBefore: Double = 0
    private var pausedAt: UInt64 = 0
    static let redialPauseSeconds = 0.25

    private func connect() -> RedisError? {
        let started = Self.monotonicSeconds()
        guard started >= noDialBefore || reachability.answered(since: pausedAt) else {
            return RedisError("Redis did not answer a connection moments ago; trying again shortly")
        }
        let failure = dialMaster()
        let finished = Self.monotonicSeconds()
        if failure != nil && finished - started > 0.1 {
            noDialBefore = finished + Self.redialPauseSeconds
            pausedAt = reachability.mark
        }
        return failure
    }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        unsafe clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    private func dialMaster() -> RedisError? {
        var host = endpoint.host
        var port = endpoint.port
        if !endpoint.sentinels.isEmpty {
            switch masterAddress() {
            case .success(let address): (host, port) = address
            case .failure(let error): return error
            }
        }
        switch unsafe dial(host, port, authenticate: true) {
        case .success(let fresh):
            // Through Sentinels, only a server that says it is the master (a failover may be under way).
            if !endpoint.sentinels.isEmpty {
                guard case .array(let role) = unsafe send(fresh, ["ROLE"]), role.first == .string("master") else {
                    unsafe redisFree(fresh)
                    return RedisError("the named master is not a master (failover under way)")
                }
            }
            unsafe context = unsafe fresh
            return nil
        case .failure(let error): return error
        }
    }

    private func attempt(_ arguments: [String]) -> RedisReply {
        lastErrorWasConnection = false
        if unsafe context == nil, let error = connect() { return .failure(error.description) }
        guard let context = unsafe context else { return .failure("no connection") }
        let reply = unsafe send(context, arguments)
        if unsafe context.pointee.err == 0 { reachability.recordAnswer() }
        if case .failure(let message) = reply {
            if unsafe context.pointee.err != 0 {
                lastErrorWasConnection = unsafe context.pointee.err == REDIS_ERR_IO || context.pointee.err == REDIS_ERR_EOF
                drop()  // the connection is unusable after an I/O error: re-dial next time
            } else if message.hasPrefix("READONLY") || message.hasPrefix("NOAUTH") || message.hasPrefix("WRONGPASS") {
                drop()  // a demoted master or a changed password: dial (and ask the Sentinels) again
            }
        }
        return reply
    }

    /// One command on `context`: the reply, or `.failure` with hiredis's error when the command could not be sent.
    private func send(_ context: UnsafeMutablePointer<redisContext>, _ arguments: [String]) -> RedisReply {
        // Each argument's exact bytes, with their count (binary-safe: a NUL inside an argument is sent as it is; a
        // C-string copy would stop at it while hiredis read on for the full length).
        var lengths: [Int] = arguments.map { $0.utf8.count }
        let buffers = unsafe zip(arguments, lengths).map { argument, count in
            let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: count + 1)
            _ = unsafe buffer.initialize(from: argument.utf8)
            unsafe buffer[count] = 0
            return unsafe buffer
        }
        defer { for index in unsafe buffers.indices { unsafe buffers[index].deallocate() } }
        var argv: [UnsafePointer<CChar>?] = unsafe buffers.map {
            unsafe UnsafeRawPointer($0.baseAddress).map { unsafe $0.assumingMemoryBound(to: CChar.self) }
        }
        guard let raw = unsafe redisCommandArgv(context, Int32(arguments.count), &argv, &lengths) else {
            let message = unsafe withUnsafePointer(to: context.pointee.errstr) {
                unsafe String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            return .failure(message.isEmpty ? "connection lost" : message)
        }
        defer { unsafe freeReplyObject(raw) }
        return unsafe Self.convert(raw.assumingMemoryBound(to: redisReply.self).pointee, depth: 0)
    }

    /// A Redis error reply reduced to its code (`WRONGPASS`, `NOPERM`, `READONLY`, `ERR`...): the rest of the text
    /// may repeat the command's arguments — an AUTH password among them — and goes nowhere.
    static func errorCode(_ text: String) -> String {
        let word = text.utf8.prefix { $0 != UInt8(ascii: " ") }
        let code = word.count <= 24 && !word.isEmpty && word.allSatisfy({ (65...90).contains($0) }) ? String(decoding: word, as: UTF8.self) : "ERR"
        return "\(code) (Redis error reply)"
    }

    /// Arrays longer than this are refused: nothing tokenguard stores has more (revocations are bounded too).
    static let maximumArrayElements = 20_000_000

    /// A hiredis reply as a Swift value; binary-safe for bulk strings (their length, not a NUL, ends them).
    private static func convert(_ reply: redisReply, depth: Int) -> RedisReply {
        switch unsafe reply.type {
        case REDIS_REPLY_INTEGER: return unsafe .integer(Int64(reply.integer))
        case REDIS_REPLY_STATUS: return unsafe .status(reply.str.map { unsafe String(cString: $0) } ?? "")
        case REDIS_REPLY_ERROR: return unsafe .failure(errorCode(reply.str.map { unsafe String(cString: $0) } ?? ""))
        case REDIS_REPLY_NIL: return .null
        case REDIS_REPLY_STRING:
            guard let str = unsafe reply.str else { return .null }
            let bytes = unsafe UnsafeRawBufferPointer(start: UnsafeRawPointer(str), count: Int(reply.len))
            return unsafe .string(String(decoding: bytes, as: UTF8.self))
        case REDIS_REPLY_ARRAY:
            let count = unsafe Int(reply.elements)
            guard depth < 4, count <= maximumArrayElements else { return .failure("reply too large or too deep") }
            guard count > 0, let elements = unsafe reply.element else { return .array([]) }
            var values: [RedisReply] = []
            values.reserveCapacity(count)
            for index in 0..<count {
                guard let element = unsafe elements[index] else { return .failure("damaged reply") }
                values.append(unsafe convert(element.pointee, depth: depth + 1))
            }
            return .array(values)
        default: return .other
        }
    }
}

@available(*, unavailable)
extension RedisConnection: Sendable {}
