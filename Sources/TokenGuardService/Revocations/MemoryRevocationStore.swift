import TokenGuardCore
import TokenGuardSync

/// Revocations in this process only: the demo (no key archive) and tests.
package final class MemoryRevocationStore: RevocationStore {
    private let state = Locked<(version: Int64, records: [ByteKey: Revocation])>((0, [:]))

    package init() {}

    private static func key(_ provider: String, _ subject: String) -> ByteKey { ByteKey(bytes: Array(provider.utf8) + [0] + Array(subject.utf8)) }

    package func version() async throws -> String { String(state.withLock { $0.version }) }
    package func all() async throws -> [Revocation] { state.withLock { Array($0.records.values) } }
    package func put(_ revocation: Revocation, onlyLater: Bool) async throws {
        state.withLock {
            let key = Self.key(revocation.provider, revocation.subject)
            if onlyLater, let existing = $0.records[key], existing.notBefore >= revocation.notBefore { return }
            $0.records[key] = revocation
            $0.version += 1
        }
    }
    package func get(provider: String, subject: String) async throws -> Revocation? {
        state.withLock { $0.records[Self.key(provider, subject)] }
    }
    package func delete(provider: String, subject: String) async throws -> Bool {
        state.withLock {
            guard $0.records.removeValue(forKey: Self.key(provider, subject)) != nil else { return false }
            $0.version += 1
            return true
        }
    }
}
