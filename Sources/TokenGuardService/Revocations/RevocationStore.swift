import Foundation
import GRDB
import TokenGuardCore
import TokenGuardSync

/// Where revocations live (config `revocations.store`): every process reads the whole set when its version changes.
package protocol RevocationStore: Sendable {
    /// A value that changes with every write (cheap to poll). Throws when the store cannot say: the caller then
    /// fails closed rather than keep an old set forever.
    func version() async throws -> String
    func all() async throws -> [Revocation]
    /// Records a revocation. With `onlyLater`, an existing later `not_before` is kept, atomically (a retried, older
    /// notification racing a newer one never moves the time back).
    func put(_ revocation: Revocation, onlyLater: Bool) async throws
    func get(provider: String, subject: String) async throws -> Revocation?
    /// True when a record was removed.
    func delete(provider: String, subject: String) async throws -> Bool
}

extension RevocationStore {
    package func put(_ revocation: Revocation) async throws { try await put(revocation, onlyLater: false) }
}

/// Revocations in SQLite (the embedded default), in their own file beside the key archive. `tokenguard revoke`
/// writes the same file; running servers see the write at their next poll. A file moved, deleted or replaced under
/// a running server is noticed (its identity is checked at every poll) and reopened; a missing one is an error.
package final class SQLiteRevocationStore: RevocationStore {
    package let path: String
    private let opened: Locked<(database: DatabaseQueue, identity: FileIdentity?)>
    /// More rows than this is a damaged or hostile file, not revocations: refused rather than loaded into memory.
    package static let maximumRecords = 10_000_000

    struct FileIdentity: Equatable {
        let device: UInt64
        let inode: UInt64
    }

    package init(path: String) throws {
        self.path = path
        let database = try Self.open(path)
        opened = Locked((database, Self.identity(path)))
    }

    static func identity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// A new file's version is random like every later one: a reader that saw another file's first version must
    /// still notice this one.
    static func open(_ path: String) throws -> DatabaseQueue {
        try SQLiteFile.open(path, tables: tables, migrations: ["v1"])
    }

    static let tables = [
        SQLiteTable(
            "revocations", [.text("provider", key: 1), .text("subject", key: 2), .integer("not_before")]),
        SQLiteTable(
            "revocations_version", [.rowID("id"), .integer("version")], checks: ["id = 1"],
            seed: "INSERT OR IGNORE INTO revocations_version (id, version) VALUES (1, random());"),
    ]

    /// The open database, reopened when the file at `path` is no longer the one opened.
    private func database() throws -> DatabaseQueue {
        let current = Self.identity(path)
        guard let current else { throw RevocationStoreError("\(path) is missing") }
        if let database = opened.withLock({ $0.identity == current ? $0.database : nil }) { return database }
        let database = try Self.open(path)
        opened.withLock { $0 = (database, current) }
        return database
    }

    package func version() async throws -> String {
        try await database().read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT version FROM revocations_version WHERE id = 1"),
                let version = SQLiteValue.int64(row, "version")
            else { throw RevocationStoreError("the version row is missing or damaged") }
            return String(version)
        }
    }

    package func all() async throws -> [Revocation] {
        try await database().read { db in
            let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM revocations") ?? 0
            guard count <= Self.maximumRecords else { throw RevocationStoreError("the store holds \(count) records, over \(Self.maximumRecords)") }
            // A damaged row (NULLs, wrong types) is skipped, never a trap.
            return try Row.fetchAll(db, sql: "SELECT provider, subject, not_before FROM revocations").compactMap { row -> Revocation? in
                guard let provider = SQLiteValue.string(row, "provider"), let subject = SQLiteValue.string(row, "subject"),
                    let notBefore = SQLiteValue.int64(row, "not_before")
                else { return nil }
                return Revocation(provider: provider, subject: subject, notBefore: notBefore)
            }
        }
    }

    package func put(_ revocation: Revocation, onlyLater: Bool) async throws {
        try await database().write { db in
            let update = onlyLater ? "max(not_before, excluded.not_before)" : "excluded.not_before"
            try db.execute(
                sql: """
                    INSERT INTO revocations (provider, subject, not_before) VALUES (?, ?, ?)
                    ON CONFLICT (provider, subject) DO UPDATE SET not_before = \(update)
                    """, arguments: [revocation.provider, revocation.subject, revocation.notBefore])
            try Self.bumpVersion(db)
        }
    }

    /// A random new version (never a counter a restore or a reset could bring back to a value already seen).
    static func bumpVersion(_ db: Database) throws {
        try db.execute(sql: "INSERT OR REPLACE INTO revocations_version (id, version) VALUES (1, ?)", arguments: [Int64.random(in: .min ... .max)])
    }

    package func get(provider: String, subject: String) async throws -> Revocation? {
        try await database().read { db in
            // SQLite compares TEXT with BINARY collation: byte for byte.
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT not_before FROM revocations WHERE provider = ? AND subject = ?", arguments: [provider, subject]),
                let notBefore = SQLiteValue.int64(row, "not_before")
            else { return nil }
            return Revocation(provider: provider, subject: subject, notBefore: notBefore)
        }
    }

    package func delete(provider: String, subject: String) async throws -> Bool {
        try await database().write { db in
            try db.execute(sql: "DELETE FROM revocations WHERE provider = ? AND subject = ?", arguments: [provider, subject])
            let removed = db.changesCount > 0
            if removed { try Self.bumpVersion(db) }
            return removed
        }
    }
}

package struct RevocationStoreError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
