import CHiredis
import Foundation
import Logging
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

    /// SET every key with EXAT, all or nothing, to the claim's *pending* value `p:<id>`. Returns 1 when recorded, 0
    /// when a key holds a settled claim (a replay), 2 when a key holds another claim still pending (undecided).
    ///
    /// A claim is pending from the moment Redis records it until its owner has decided to keep it: until then the
    /// owner may still take it back (its request was answered without it, a timeout or a batch's deadline), and a
    /// retry of that token finding it must not be told `token_replayed`. The owner settles a kept claim (`settleScript`)
    /// after answering; a pending key blocks every other claim exactly as a settled one does, so nothing is accepted
    /// twice while it is pending.
    ///
    /// Each claim carries its own random id (ARGV[2]): when a command timed out but still ran in Redis (a pause, a slow
    /// fork) and is sent again, it finds its own keys and counts as recorded — a first sign-in is never answered
    /// `token_replayed` because of our own retry.
    static let claimScript = """
        local pending = 'p:' .. ARGV[2]
        local mine = 0
        local unsettled = false
        for i = 1, #KEYS do
          local value = redis.call('GET', KEYS[i])
          if value then
            if value == pending or value == ARGV[2] then mine = mine + 1
            elseif string.sub(value, 1, 2) == 'p:' then unsettled = true
            else return 0 end
          end
        end
        if unsettled then return 2 end
        if mine == #KEYS then return 1 end
        for i = 1, #KEYS do
          redis.call('SET', KEYS[i], pending, 'EXAT', ARGV[1])
        end
        return 1
        """

    /// Marks a kept claim settled: its keys, still pending under this claim's id, take the id itself (ARGV[1]).
    static let settleScript = """
        for i = 1, #KEYS do
          if redis.call('GET', KEYS[i]) == 'p:' .. ARGV[1] then redis.call('SET', KEYS[i], ARGV[1], 'EXAT', ARGV[2]) end
        end
        return 1
        """

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
        var random = SystemRandomNumberGenerator()
        let claimID = "c" + String(random.next(), radix: 16) + String(random.next(), radix: 16)
        let arguments = ["EVAL", Self.claimScript, String(keys.count)] + keys + [String(expiresAt), claimID]
        let started = RedisConnection.monotonicSeconds()
        var pause = Self.firstUnsettledPauseSeconds
        while true {
            // A request already answered (its timeout fired, or its batch closed) claims nothing: a claim nobody will
            // hear of would only make the token's next use token_replayed.
            if !ReplayClaimGates.mayStillClaim() { return .failure(Self.abandoned) }
            let reply = await send(arguments, keys: keys, claimID: claimID)
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

    /// Sends the claim script (with `WAIT 1` behind it through Sentinels): Redis's reply, or why it does not count.
    private func send(_ arguments: [String], keys: [String], claimID: String) async -> Result<RedisReply, VerificationError> {
        guard waitForReplica else { return .success(await client.command(arguments)) }
        let replies = await client.commands([arguments, ["WAIT", "1", "500"]]) { $0 == .integer(1) }
        let reply = replies.first ?? .failure("no reply")
        if reply == .integer(1) {
            guard replies.count == 2, case .integer(let acknowledged) = replies[1], acknowledged >= 1 else {
                inBackground(["EVAL", Self.releaseScript, String(keys.count)] + keys + [claimID], times: 3)
                return .failure(unavailable("no replica confirmed the replay claim in time (WAIT 1): not counted"))
            }
        }
        return .success(reply)
    }

    /// What a claim's reply means for the verification, settling or releasing the claim.
    private func answer(to reply: Result<RedisReply, VerificationError>, keys: [String], claimID: String, expiresAt: Int64) -> Result<
        Bool, VerificationError
    > {
        let release = ["EVAL", Self.releaseScript, String(keys.count)] + keys + [claimID]
        switch reply {
        case .failure(let error): return .failure(error)
        case .success(.integer(1)) where !ReplayClaimGates.mayKeepClaim():
            // The request was answered while the claim waited on Redis (its timeout's 503, its batch's deadline), so
            // this claim is not an acceptance, and it is taken back. It is still pending: a retry meanwhile waits for
            // the release instead of being told token_replayed.
            inBackground(release, times: 3)
            return .failure(Self.abandoned)
        case .success(.integer(1)):
            inBackground(["EVAL", Self.settleScript, String(keys.count)] + keys + [claimID, String(expiresAt)], times: 1)
            return answered(true)
        case .success(.integer(0)): return answered(false)
        case .success(.failure(let message)):
            inBackground(release, times: 3)
            return .failure(unavailable(message))
        case .success:
            inBackground(release, times: 3)
            return .failure(unavailable("unexpected reply to the claim script"))
        }
    }

    static let abandoned = ReplayGuard.abandoned

    /// Deletes the keys that still hold this claim's id, pending or settled. Only this claim's own keys go: another
    /// claim's id never matches.
    static let releaseScript = """
        for i = 1, #KEYS do
          local value = redis.call('GET', KEYS[i])
          if value == ARGV[1] or value == 'p:' .. ARGV[1] then redis.call('DEL', KEYS[i]) end
        end
        return 1
        """

    /// Settles and releases still being tried (bounded: past it, a claim taken back stays until its token expires, and
    /// a kept one stays pending, which refuses every later claim all the same).
    private let backgroundPending = Locked(0)
    static let maximumBackgroundCommands = 10_000

    /// Runs a settle or release script off the request, retried for about a minute while Redis cannot answer.
    ///
    /// A claim answered 503 was never an acceptance, but Redis may have run it anyway (a command that timed out still
    /// runs when Redis wakes; a claim no replica confirmed stays on the master): left there, it would make every later
    /// use of a token never accepted unanswerable. Redis may also run that stale claim after the first release when
    /// both wait on a paused server (it serves its connections in any order), so a release that went through is made
    /// twice more (`times: 3`), half a second and two seconds later.
    private func inBackground(_ arguments: [String], times: Int) {
        let admitted = backgroundPending.withLock { count -> Bool in
            guard count < Self.maximumBackgroundCommands else { return false }
            count += 1
            return true
        }
        guard admitted else { return }
        Task.detached { [client, backgroundPending] in
            defer { backgroundPending.withLock { $0 -= 1 } }
            var pause = 0.1
            var done = 0
            for _ in 0..<24 where done < times {
                if case .integer = await client.command(arguments) {
                    done += 1
                    pause = done == 1 ? 0.5 : 2
                } else {
                    pause = min(pause * 2, 5)
                }
                if done < times { try? await Task.sleep(for: .seconds(pause)) }
            }
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

    /// Parses `redis://host:port`.
    package convenience init(url: String, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) throws
    {
        self.init(
            endpoint: try RedisEndpoint.parse(url), connections: connections, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
            commandTimeoutMilliseconds: commandTimeoutMilliseconds)
    }

    package init(endpoint: RedisEndpoint, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) {
        self.endpoint = endpoint
        workers = ThreadConfinedWorkers(threads: connections, name: "tokenguard-redis") {
            RedisConnection(endpoint: endpoint, connectMilliseconds: connectTimeoutMilliseconds, commandMilliseconds: commandTimeoutMilliseconds)
        }
    }

    deinit { workers.shutdown() }

    func command(_ arguments: [String]) async -> RedisReply { await workers.run { $0.command(arguments) } }

    /// Commands on one connection, in order; stops at the first whose reply `proceed` refuses.
    func commands(_ list: [[String]], proceed: @escaping @Sendable (RedisReply) -> Bool) async -> [RedisReply] {
        await workers.run { connection in
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
    case integer(Int64)
    case status(String)
    /// A bulk string (bytes, decoded as UTF-8).
    case string(String)
    case array([RedisReply])
    case null
    case other
    case failure(String)
}

/// Owns one `redisContext` (one connection), dialled lazily and re-dialled after any error: to the server, or to the
/// master the Sentinels name (asked again at every dial, so a failover is followed), then AUTH and SELECT.
@safe final class RedisConnection {
    let endpoint: RedisEndpoint
    let connectTimeout: timeval
    let commandTimeout: timeval
    private var context: UnsafeMutablePointer<redisContext>?

    init(endpoint: RedisEndpoint, connectMilliseconds: Int, commandMilliseconds: Int) {
        self.endpoint = endpoint
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
            guard unsafe send(fresh, ["SELECT", String(database)]) == .status("OK") else {
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
        guard reply == .status("OK") else {
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
    /// refused connection fails fast by itself and pauses nothing, so a restarted Redis is used at once.
    private var noDialBefore: Double = 0
    static let redialPauseSeconds = 0.25

    private func connect() -> RedisError? {
        let started = Self.monotonicSeconds()
        guard started >= noDialBefore else { return RedisError("Redis did not answer a connection moments ago; trying again shortly") }
        let failure = dialMaster()
        let finished = Self.monotonicSeconds()
        if failure != nil && finished - started > 0.1 { noDialBefore = finished + Self.redialPauseSeconds }
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
        let cStrings = unsafe arguments.map { unsafe strdup($0) }
        defer { for index in unsafe cStrings.indices { unsafe free(cStrings[index]) } }
        var argv: [UnsafePointer<CChar>?] = unsafe cStrings.map { unsafe UnsafePointer($0) }
        var lengths: [Int] = arguments.map { $0.utf8.count }
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
