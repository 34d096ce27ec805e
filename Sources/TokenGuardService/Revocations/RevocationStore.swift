import Foundation
import GRDB
import TokenGuardCore

/// Where revocations live (config `revocations.store`): every process reads the whole set when its version changes.
package protocol RevocationStore: Sendable {
    /// A number that changes with every write (cheap to poll).
    func version() async throws -> Int64
    func all() async throws -> [Revocation]
    func put(_ revocation: Revocation) async throws
    func get(provider: String, subject: String) async throws -> Revocation?
    /// True when a record was removed.
    func delete(provider: String, subject: String) async throws -> Bool
}

/// Revocations in SQLite (the embedded default), in their own file beside the key archive. `tokenguard revoke`
/// writes the same file; running servers see the write at their next poll.
package final class SQLiteRevocationStore: RevocationStore {
    package let path: String
    private let database: DatabaseQueue
    /// More rows than this is a damaged or hostile file, not revocations: refused rather than loaded into memory.
    package static let maximumRecords = 10_000_000

    package init(path: String) throws {
        self.path = path
        var configuration = GRDB.Configuration()
        configuration.busyMode = .timeout(2)
        database = try DatabaseQueue(path: path, configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE revocations (
                        provider TEXT NOT NULL,
                        subject TEXT NOT NULL,
                        not_before INTEGER NOT NULL,
                        PRIMARY KEY (provider, subject)
                    );
                    CREATE TABLE revocations_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
                    INSERT INTO revocations_version (id, version) VALUES (1, 0);
                    """)
        }
        try migrator.migrate(database)
    }

    package func version() async throws -> Int64 {
        try await database.read { db in try Int64.fetchOne(db, sql: "SELECT version FROM revocations_version WHERE id = 1") ?? 0 }
    }

    package func all() async throws -> [Revocation] {
        try await database.read { db in
            let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM revocations") ?? 0
            guard count <= Self.maximumRecords else { throw RevocationStoreError("the store holds \(count) records, over \(Self.maximumRecords)") }
            // Rows are read as optionals: a damaged row (NULLs, wrong types) is skipped, never a trap.
            return try Row.fetchAll(db, sql: "SELECT provider, subject, not_before FROM revocations").compactMap { row -> Revocation? in
                guard let provider: String = row["provider"], let subject: String = row["subject"], let notBefore: Int64 = row["not_before"] else {
                    return nil
                }
                return Revocation(provider: provider, subject: subject, notBefore: notBefore)
            }
        }
    }

    package func put(_ revocation: Revocation) async throws {
        try await database.write { db in
            try db.execute(
                sql: """
                    INSERT INTO revocations (provider, subject, not_before) VALUES (?, ?, ?)
                    ON CONFLICT (provider, subject) DO UPDATE SET not_before = excluded.not_before
                    """, arguments: [revocation.provider, revocation.subject, revocation.notBefore])
            try db.execute(sql: "UPDATE revocations_version SET version = version + 1 WHERE id = 1")
        }
    }

    package func get(provider: String, subject: String) async throws -> Revocation? {
        try await database.read { db in
            // SQLite compares TEXT with BINARY collation: byte for byte.
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT not_before FROM revocations WHERE provider = ? AND subject = ?", arguments: [provider, subject]),
                let notBefore: Int64 = row["not_before"]
            else { return nil }
            return Revocation(provider: provider, subject: subject, notBefore: notBefore)
        }
    }

    package func delete(provider: String, subject: String) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM revocations WHERE provider = ? AND subject = ?", arguments: [provider, subject])
            let removed = db.changesCount > 0
            if removed { try db.execute(sql: "UPDATE revocations_version SET version = version + 1 WHERE id = 1") }
            return removed
        }
    }
}

package struct RevocationStoreError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
