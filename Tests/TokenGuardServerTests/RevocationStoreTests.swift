import Foundation
import GRDB
import Testing
import TokenGuardCore
import TokenGuardRedis
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// The revocation stores under damage and races (the second red-team round's findings).
@Suite(.serialized)
struct RevocationStoreTests {
    func revocation(_ subject: String, _ notBefore: Int64, provider: String = "apple") -> Revocation {
        Revocation(provider: provider, subject: subject, notBefore: notBefore)
    }

    @Test("damaged SQLite rows (text, huge real, wrong types) are skipped, never a trap; so are damaged key-archive rows")
    func damagedRows() async throws {
        let workspace = try TempWorkspace()
        let path = workspace.url.appendingPathComponent("revocations.sqlite").path
        let store = try SQLiteRevocationStore(path: path)
        try await store.put(revocation("good", 100))
        let raw = try DatabaseQueue(path: path)
        try await raw.write { db in
            try db.execute(sql: "INSERT INTO revocations VALUES ('apple', 'text', 'abc'), ('apple', 'real', 1e300), ('apple', 'blob', x'00ff')")
            try db.execute(sql: "INSERT INTO revocations VALUES (7, 'number-provider', 5)")
            try db.execute(sql: "UPDATE revocations_version SET version = version + 1")
        }
        let subjects = Set(try await store.all().map(\.subject))
        #expect(subjects.contains("good") && subjects.isDisjoint(with: ["text", "real", "blob"]), "\(subjects)")
        #expect(try await store.get(provider: "apple", subject: "text") == nil)
        let archivePath = workspace.url.appendingPathComponent("keys.sqlite").path
        let archive = try KeyArchive(path: archivePath)
        try await DatabaseQueue(path: archivePath).write { db in
            try db.execute(
                sql: """
                    INSERT INTO key_versions VALUES ('apple', 's', 'k', 't', '{}', 'first', 'last'), ('apple', 's', 'k2', 't2', x'00', 1, 2),
                    ('apple', x'73', 'k3', 't3', '{}', 100000, 100001)
                    """)
            try db.execute(sql: "INSERT INTO tenant_names VALUES ('a', 'n', 5, 'x')")
        }
        #expect(try archive.entries(provider: "apple", source: nil).isEmpty)
        #expect(try archive.tenants(authority: "a").isEmpty)
    }

    @Test("an archive from before key sources opens, and its keys (whose source is unknown) are never read")
    func archiveWithoutSources() async throws {
        let workspace = try TempWorkspace()
        let path = workspace.url.appendingPathComponent("keys.sqlite").path
        let jwk = try SharedTestKeys.jwks([try SharedTestKeys.rsa()])
        try await DatabaseQueue(path: path).write { db in
            try db.execute(
                sql: """
                    CREATE TABLE keys (provider TEXT NOT NULL, kid TEXT NOT NULL, thumbprint TEXT NOT NULL, jwk TEXT NOT NULL,
                    first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL, PRIMARY KEY (provider, kid, thumbprint));
                    INSERT INTO keys VALUES ('apple', 'k', 't', ?, 1767000000, 1767000000)
                    """, arguments: [jwk])
        }
        let archive = try KeyArchive(path: path)
        #expect(try archive.entries(provider: "apple", source: nil).isEmpty)
    }

    @Test("a store file moved, replaced or deleted under a running reader: reopened, or an error (fail closed), never the old file")
    func replacedFile() async throws {
        let workspace = try TempWorkspace()
        let path = workspace.url.appendingPathComponent("revocations.sqlite").path
        let running = try SQLiteRevocationStore(path: path)
        try await running.put(revocation("erin", 100))
        try FileManager.default.moveItem(atPath: path, toPath: path + ".old")
        await #expect(throws: (any Error).self) { try await running.version() }
        let cli = try SQLiteRevocationStore(path: path)  // what `tokenguard revoke` would create now
        try await cli.put(revocation("ivan", 200))
        #expect(try await running.all() == [revocation("ivan", 200)])
        let guardian = RevocationGuard(store: running, maximumStaleness: 60)
        await guardian.refresh()
        #expect(guardian.isFresh && guardian.count == 1)
        try FileManager.default.removeItem(atPath: path)
        await guardian.refresh()
        // A failed read keeps the last set until the staleness window ends; the next read keeps failing.
        await #expect(throws: (any Error).self) { try await running.version() }
    }

    @Test("a missing version row is an error, and every write gives a version never seen before")
    func versions() async throws {
        let workspace = try TempWorkspace()
        let path = workspace.url.appendingPathComponent("revocations.sqlite").path
        let store = try SQLiteRevocationStore(path: path)
        var seen: Set<String> = [try await store.version()]
        for index in 0..<20 {
            try await store.put(revocation("s\(index)", Int64(index)))
            #expect(seen.insert(try await store.version()).inserted)
        }
        try await DatabaseQueue(path: path).write { db in try db.execute(sql: "DELETE FROM revocations_version") }
        await #expect(throws: (any Error).self) { try await store.version() }
        let guardian = RevocationGuard(store: store, maximumStaleness: 0.2)
        await guardian.refresh()
        #expect(!guardian.isFresh)
    }

    @Test("racing notifications: with onlyLater the latest time wins, whatever the order (SQLite, memory, Redis)")
    func onlyLaterRaces() async throws {
        let workspace = try TempWorkspace()
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let stores: [any RevocationStore] = [
            try SQLiteRevocationStore(path: workspace.url.appendingPathComponent("r.sqlite").path), MemoryRevocationStore(),
            try RedisRevocationStore(url: redis.url),
        ]
        for store in stores {
            for round in 0..<5 {
                let subject = "race-\(round)"
                let times = (0..<12).map { _ in Int64.random(in: 1_000...1_000_000) }
                await withTaskGroup(of: Void.self) { group in
                    for time in times {
                        group.addTask { try? await store.put(Revocation(provider: "apple", subject: subject, notBefore: time), onlyLater: true) }
                    }
                }
                #expect(try await store.get(provider: "apple", subject: subject)?.notBefore == times.max(), "\(type(of: store))")
            }
            // An explicit write (an admin's) may move it back.
            try await store.put(revocation("race-0", 5))
            #expect(try await store.get(provider: "apple", subject: "race-0")?.notBefore == 5)
        }
    }

    @Test("Redis: subjects with any bytes but NUL round-trip; a reset to an old version still reloads")
    func redisFields() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let store = try RedisRevocationStore(url: redis.url)
        let subjects = ["a\nb", "12:ab", "\t", String(repeating: "ü", count: 500), ":", "apple\n"]
        for subject in subjects { try await store.put(revocation(subject, 42, provider: "ab")) }
        try await store.put(revocation("x", 1, provider: "a"))
        let all = try await store.all()
        #expect(Set(all.map(\.subject)) == Set(subjects + ["x"]))
        #expect(all.first { $0.subject == "x" }?.provider == "a")
        let before = try await store.version()
        try await store.put(revocation("y", 2))
        #expect(try await store.version() != before)
    }
}

/// Replicas started together, or `tokenguard revoke` beside a starting server, open one new file at the same instant.
@Suite
struct SQLiteFirstOpenTests {
    @Test("stores opened at the same instant on one new file all open, and find one schema")
    func simultaneousFirstOpens() async throws {
        let workspace = try TempWorkspace()
        for round in 0..<40 {
            let revocationsPath = workspace.url.appendingPathComponent("revocations-\(round).sqlite").path
            let archivePath = workspace.url.appendingPathComponent("keys-\(round).sqlite").path
            let failures = Locked<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 8) { index in
                do {
                    if index.isMultiple(of: 2) {
                        _ = try SQLiteRevocationStore(path: revocationsPath)
                    } else {
                        _ = try KeyArchive(path: archivePath)
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            #expect(failures.withLock { $0 } == [], "round \(round)")
            let store = try SQLiteRevocationStore(path: revocationsPath)
            _ = try await store.version()
            #expect(try await store.all().isEmpty)
            #expect(try KeyArchive(path: archivePath).entries(provider: "apple", source: nil).isEmpty)
        }
    }

    @Test(
        "a file whose tables have tokenguard's names but not its columns, types, NOT NULLs or keys is refused, never written into",
        arguments: [
            "CREATE TABLE revocations (provider TEXT NOT NULL, subject TEXT NOT NULL, not_before TEXT NOT NULL, PRIMARY KEY (provider, subject))",
            "CREATE TABLE revocations (provider TEXT NOT NULL, subject INTEGER NOT NULL, not_before INTEGER NOT NULL, PRIMARY KEY (provider, subject))",
            "CREATE TABLE revocations (provider TEXT NOT NULL, subject TEXT NOT NULL, not_before INTEGER NOT NULL)",
            "CREATE TABLE revocations (provider TEXT, subject TEXT, not_before INTEGER, PRIMARY KEY (provider, subject))",
            "CREATE TABLE revocations_version (id INTEGER, version INTEGER NOT NULL)",
            "CREATE TABLE revocations (provider TEXT NOT NULL, subject TEXT NOT NULL COLLATE NOCASE, not_before INTEGER NOT NULL, PRIMARY KEY (provider, subject))",
            // Types that only Unicode case mapping would make tokenguard's ("ınteger" uppercases to "INTEGER").
            "CREATE TABLE revocations (provider TEXT NOT NULL, subject TEXT NOT NULL, not_before \u{131}nteger NOT NULL, PRIMARY KEY (provider, subject))",
            """
            CREATE TABLE revocations (provider TEXT NOT NULL, subject TEXT NOT NULL, not_before INTEGER NOT NULL, PRIMARY KEY (provider, subject));
            CREATE TRIGGER undo AFTER INSERT ON revocations BEGIN DELETE FROM revocations; END
            """,
            "CREATE TABLE t (a); CREATE VIEW revocations AS SELECT a AS provider, a AS subject, a AS not_before FROM t",
            "CREATE TABLE key_versions (provider TEXT NOT NULL, kid TEXT NOT NULL, jwk TEXT NOT NULL, PRIMARY KEY (provider, kid))",
            "CREATE TABLE tenant_names (authority TEXT NOT NULL, name TEXT NOT NULL, tenant_id INTEGER NOT NULL, resolved_at INTEGER NOT NULL, PRIMARY KEY (authority, name))",
        ])
    func foreignTables(sql: String) async throws {
        let workspace = try TempWorkspace()
        let path = workspace.url.appendingPathComponent("file.sqlite").path
        try await DatabaseQueue(path: path).write { db in try db.execute(sql: sql) }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let isArchive = sql.contains("TABLE key_versions") || sql.contains("TABLE tenant_names")
        #expect(throws: (any Error).self) {
            if isArchive { _ = try KeyArchive(path: path) } else { _ = try SQLiteRevocationStore(path: path) }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "nothing written into a file that is not ours")
    }

    @Test("a complete file opens without a write (a read-only replica, a writer holding the lock); GRDB's migrator finds it migrated")
    func completeFilesOpenWithoutWriting() async throws {
        let workspace = try TempWorkspace()
        let revocationsPath = workspace.url.appendingPathComponent("revocations.sqlite").path
        let archivePath = workspace.url.appendingPathComponent("keys.sqlite").path
        try await SQLiteRevocationStore(path: revocationsPath).put(Revocation(provider: "apple", subject: "s", notBefore: 5))
        _ = try KeyArchive(path: archivePath)
        // A tokenguard that still makes its tables with GRDB's migrator (the same migration names) finds nothing to do.
        for (path, names) in [(revocationsPath, ["v1"]), (archivePath, ["v1", "v2-tenant-names", "v3-key-sources"])] {
            var migrator = DatabaseMigrator()
            for name in names { migrator.registerMigration(name) { _ in Issue.record("migration \(name) ran again on \(path)") } }
            try migrator.migrate(try DatabaseQueue(path: path))
        }
        // Another process holds the write lock for longer than the busy timeout: opening still works, as it only reads.
        for path in [revocationsPath, archivePath] {
            let seconds = try Self.secondsToOpenWhileLocked(path, archive: path == archivePath)
            #expect(seconds < 1.5, "no wait for the write lock")
        }
        #expect(try await SQLiteRevocationStore(path: revocationsPath).all() == [Revocation(provider: "apple", subject: "s", notBefore: 5)])
    }

    /// Seconds to open the store at `path` while another connection holds its write lock.
    static func secondsToOpenWhileLocked(_ path: String, archive: Bool) throws -> Double {
        let holder = try DatabaseQueue(path: path)
        return try holder.writeWithoutTransaction { db -> Double in
            try db.execute(sql: "BEGIN IMMEDIATE")
            defer { try? db.execute(sql: "ROLLBACK") }
            let started = Date()
            if archive { _ = try KeyArchive(path: path) } else { _ = try SQLiteRevocationStore(path: path) }
            return Date().timeIntervalSince(started)
        }
    }
}
