import TokenGuardCore
import TokenGuardService

/// Revocations for a fleet, in one Redis hash (`tokenguard:revocations`, field `provider LF subject`, value
/// `not_before`) with a version counter every write increments in the same script, so replicas poll one `GET`.
package final class RedisRevocationStore: RevocationStore {
    static let hash = "tokenguard:revocations"
    static let versionKey = "tokenguard:revocations:version"
    private let client: RedisClient

    package init(url: String) throws { client = try RedisClient(url: url, connections: 2) }

    /// Subjects never hold control characters (refused on write), so a line feed separates the two parts.
    static func field(_ provider: String, _ subject: String) -> String { provider + "\n" + subject }

    func failure(_ reply: RedisReply) -> RevocationStoreError {
        if case .failure(let message) = reply { return RevocationStoreError("redis \(client.host):\(client.port): \(message)") }
        return RevocationStoreError("redis \(client.host):\(client.port) answered unexpectedly")
    }

    package func version() async throws -> Int64 {
        switch await client.command(["GET", Self.versionKey]) {
        case .null: return 0
        case .string(let text): return Int64(text) ?? -1
        case let other: throw failure(other)
        }
    }

    package func all() async throws -> [Revocation] {
        guard case .array(let items) = await client.command(["HGETALL", Self.hash]) else { throw RevocationStoreError("HGETALL failed") }
        guard items.count / 2 <= SQLiteRevocationStore.maximumRecords else { throw RevocationStoreError("too many revocations") }
        var revocations: [Revocation] = []
        revocations.reserveCapacity(items.count / 2)
        var index = 0
        while index + 1 < items.count {
            defer { index += 2 }
            // A damaged entry (written by hand) is skipped, never a trap.
            guard case .string(let field) = items[index], case .string(let value) = items[index + 1], let notBefore = Int64(value),
                let separator = field.utf8.firstIndex(of: 0x0A)
            else { continue }
            let provider = String(decoding: field.utf8[..<separator], as: UTF8.self)
            let subject = String(decoding: field.utf8[field.utf8.index(after: separator)...], as: UTF8.self)
            revocations.append(Revocation(provider: provider, subject: subject, notBefore: notBefore))
        }
        return revocations
    }

    package func put(_ revocation: Revocation) async throws {
        let script = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]); return redis.call('INCR', KEYS[2])"
        let reply = await client.command([
            "EVAL", script, "2", Self.hash, Self.versionKey, Self.field(revocation.provider, revocation.subject), String(revocation.notBefore),
        ])
        guard case .integer = reply else { throw failure(reply) }
    }

    package func get(provider: String, subject: String) async throws -> Revocation? {
        switch await client.command(["HGET", Self.hash, Self.field(provider, subject)]) {
        case .null: return nil
        case .string(let value):
            guard let notBefore = Int64(value) else { return nil }
            return Revocation(provider: provider, subject: subject, notBefore: notBefore)
        case let other: throw failure(other)
        }
    }

    package func delete(provider: String, subject: String) async throws -> Bool {
        let script = "if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then redis.call('INCR', KEYS[2]); return 1 end; return 0"
        let reply = await client.command(["EVAL", script, "2", Self.hash, Self.versionKey, Self.field(provider, subject)])
        guard case .integer(let removed) = reply else { throw failure(reply) }
        return removed == 1
    }
}
