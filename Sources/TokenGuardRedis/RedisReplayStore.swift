import CHiredis
import Foundation
import TokenGuardCore
import TokenGuardService

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

    /// SET every key with EXAT, all or nothing. Returns 1 when recorded, 0 when any key existed. Each claim
    /// carries its own random id (ARGV[2]) as the value: when a command timed out but still ran in Redis (a pause,
    /// a slow fork) and is sent again, it finds its own keys and counts as recorded — a first sign-in is never
    /// answered `token_replayed` because of our own retry.
    static let claimScript = """
        local mine = 0
        for i = 1, #KEYS do
          local value = redis.call('GET', KEYS[i])
          if value then
            if value == ARGV[2] then mine = mine + 1 else return 0 end
          end
        end
        if mine == #KEYS then return 1 end
        for i = 1, #KEYS do
          redis.call('SET', KEYS[i], ARGV[2], 'EXAT', ARGV[1])
        end
        return 1
        """

    /// Parses `redis://host:port`.
    package init(url: String, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) throws {
        client = try RedisClient(
            url: url, connections: connections, connectTimeoutMilliseconds: connectTimeoutMilliseconds,
            commandTimeoutMilliseconds: commandTimeoutMilliseconds)
    }

    package func claim(keys: [String], expiresAt: Int64) async -> Result<Bool, VerificationError> {
        var random = SystemRandomNumberGenerator()
        let claimID = "c" + String(random.next(), radix: 16) + String(random.next(), radix: 16)
        let arguments = ["EVAL", Self.claimScript, String(keys.count)] + keys + [String(expiresAt), claimID]
        let reply = await client.command(arguments)
        switch reply {
        case .integer(1): return .success(true)
        case .integer(0): return .success(false)
        case .failure(let message):
            return .failure(VerificationError(.replayStoreUnavailable, "the replay store (Redis) cannot answer: \(message)", retryAfterSeconds: 2))
        default:
            return .failure(VerificationError(.replayStoreUnavailable, "the replay store (Redis) answered unexpectedly", retryAfterSeconds: 2))
        }
    }

    package func health() async -> (ok: Bool, detail: String) {
        switch await client.command(["PING"]) {
        case .status("PONG"): return (true, "redis \(host):\(port)")
        case .failure(let message): return (false, "redis \(host):\(port): \(message)")
        default: return (false, "redis \(host):\(port): unexpected PING reply")
        }
    }
}

/// Connections to one Redis server: a fixed set of worker threads each owns one connection (the pool); blocking
/// hiredis calls run there, never on Swift's cooperative pool.
package final class RedisClient: Sendable {
    package let host: String
    package let port: Int
    private let workers: ThreadConfinedWorkers<RedisConnection>

    /// Parses `redis://host:port`.
    package init(url: String, connections: Int = 4, connectTimeoutMilliseconds: Int = 500, commandTimeoutMilliseconds: Int = 1000) throws {
        guard url.hasPrefix("redis://") else { throw RedisError("redis_url must be redis://HOST:PORT") }
        let authority = url.dropFirst("redis://".count).prefix { $0 != "/" }
        guard let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]), (1...65535).contains(port)
        else { throw RedisError("redis_url must be redis://HOST:PORT") }
        let host = String(authority[..<colon])
        self.host = host
        self.port = port
        workers = ThreadConfinedWorkers(threads: connections, name: "tokenguard-redis") {
            RedisConnection(host: host, port: port, connectMilliseconds: connectTimeoutMilliseconds, commandMilliseconds: commandTimeoutMilliseconds)
        }
    }

    deinit { workers.shutdown() }

    func command(_ arguments: [String]) async -> RedisReply { await workers.run { $0.command(arguments) } }
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

/// Owns one `redisContext` (one connection), dialled lazily and re-dialled after any error.
@safe final class RedisConnection {
    let host: String
    let port: Int
    let connectTimeout: timeval
    let commandTimeout: timeval
    private var context: UnsafeMutablePointer<redisContext>?

    init(host: String, port: Int, connectMilliseconds: Int, commandMilliseconds: Int) {
        self.host = host
        self.port = port
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

    private func attempt(_ arguments: [String]) -> RedisReply {
        lastErrorWasConnection = false
        if unsafe context == nil {
            guard let fresh = unsafe redisConnectWithTimeout(host, Int32(port), connectTimeout) else {
                return .failure("cannot allocate a connection")
            }
            if unsafe fresh.pointee.err != 0 {
                let message = unsafe withUnsafePointer(to: fresh.pointee.errstr) {
                    unsafe String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                }
                unsafe redisFree(fresh)
                return .failure(message)
            }
            _ = unsafe redisSetTimeout(fresh, commandTimeout)
            unsafe context = unsafe fresh
        }
        guard let context = unsafe context else { return .failure("no connection") }
        let cStrings = unsafe arguments.map { unsafe strdup($0) }
        defer { for index in unsafe cStrings.indices { unsafe free(cStrings[index]) } }
        var argv: [UnsafePointer<CChar>?] = unsafe cStrings.map { unsafe UnsafePointer($0) }
        var lengths: [Int] = arguments.map { $0.utf8.count }
        guard let raw = unsafe redisCommandArgv(context, Int32(arguments.count), &argv, &lengths) else {
            let message = unsafe withUnsafePointer(to: context.pointee.errstr) {
                unsafe String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            lastErrorWasConnection = unsafe context.pointee.err == REDIS_ERR_IO || context.pointee.err == REDIS_ERR_EOF
            drop()  // the connection is unusable after an I/O error: re-dial next time
            return .failure(message.isEmpty ? "connection lost" : message)
        }
        defer { unsafe freeReplyObject(raw) }
        return unsafe Self.convert(raw.assumingMemoryBound(to: redisReply.self).pointee, depth: 0)
    }

    /// Arrays longer than this are refused: nothing tokenguard stores has more (revocations are bounded too).
    static let maximumArrayElements = 20_000_000

    /// A hiredis reply as a Swift value; binary-safe for bulk strings (their length, not a NUL, ends them).
    private static func convert(_ reply: redisReply, depth: Int) -> RedisReply {
        switch unsafe reply.type {
        case REDIS_REPLY_INTEGER: return unsafe .integer(Int64(reply.integer))
        case REDIS_REPLY_STATUS: return unsafe .status(reply.str.map { unsafe String(cString: $0) } ?? "")
        case REDIS_REPLY_ERROR: return unsafe .failure(reply.str.map { unsafe String(cString: $0) } ?? "error reply")
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
