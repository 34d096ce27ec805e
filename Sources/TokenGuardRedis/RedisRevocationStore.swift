import TokenGuardCore
import TokenGuardService

/// Revocations for a fleet, in one Redis hash (`tokenguard:revocations`, field `{provider length}:{provider}{subject}`,
/// value `not_before`) with a version key every write sets to a new random value in the same script, so replicas poll
/// one `GET` and no restore or reset can bring back a version already seen.
package final class RedisRevocationStore: RevocationStore {
    static let hash = "tokenguard:revocations"
    static let versionKey = "tokenguard:revocations:version"
    private let client: RedisClient

    package convenience init(url: String) throws { self.init(endpoint: try RedisEndpoint.parse(url)) }

    package init(endpoint: RedisEndpoint) { client = RedisClient(endpoint: endpoint, connections: 2) }

    /// The provider's length first, so no subject can make two pairs collide.
    static func field(_ provider: String, _ subject: String) -> String { "\(provider.utf8.count):\(provider)\(subject)" }

    static func parseField(_ field: String) -> (provider: String, subject: String)? {
        let bytes = Array(field.utf8)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, colon <= 3,
            bytes[..<colon].allSatisfy({ (48...57).contains($0) }), let length = Int(String(decoding: bytes[..<colon], as: UTF8.self)),
            bytes.count >= colon + 1 + length
        else { return nil }
        let provider = String(decoding: bytes[(colon + 1)..<(colon + 1 + length)], as: UTF8.self)
        let subject = String(decoding: bytes[(colon + 1 + length)...], as: UTF8.self)
        return (provider, subject)
    }

    static func randomVersion() -> String { String(UInt64.random(in: .min ... .max), radix: 16) }

    func failure(_ reply: RedisReply) -> RevocationStoreError {
        if case .failure(let message) = reply { return RevocationStoreError("\(client.endpoint.description): \(message)") }
        return RevocationStoreError("\(client.endpoint.description) answered unexpectedly")
    }

    package func version() async throws -> String {
        switch await client.command(["GET", Self.versionKey]) {
        case .null: return "none"
        case .string(let text): return text
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
                let (provider, subject) = Self.parseField(field)
            else { continue }
            revocations.append(Revocation(provider: provider, subject: subject, notBefore: notBefore))
        }
        return revocations
    }

    /// ARGV: field, not_before, "1" to keep a later existing value, the new version.
    static let putScript = """
        local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
        if ARGV[3] == '1' and current and current >= tonumber(ARGV[2]) then return 0 end
        redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
        redis.call('SET', KEYS[2], ARGV[4])
        return 1
        """

    package func put(_ revocation: Revocation, onlyLater: Bool) async throws {
        let reply = await client.command([
            "EVAL", Self.putScript, "2", Self.hash, Self.versionKey, Self.field(revocation.provider, revocation.subject),
            String(revocation.notBefore), onlyLater ? "1" : "0", Self.randomVersion(),
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
        let script = "if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then redis.call('SET', KEYS[2], ARGV[2]); return 1 end; return 0"
        let reply = await client.command(["EVAL", script, "2", Self.hash, Self.versionKey, Self.field(provider, subject), Self.randomVersion()])
        guard case .integer(let removed) = reply else { throw failure(reply) }
        return removed == 1
    }
}
