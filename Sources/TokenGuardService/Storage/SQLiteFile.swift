import GRDB
import TokenGuardCore

/// A value read from a SQLite row only when it has the expected storage class: GRDB's typed reads trap on a value of
/// another type, and the file is one anyone with disk access can edit.
package enum SQLiteValue {
    package static func int64(_ row: Row, _ column: String) -> Int64? {
        if case .int64(let value) = (row[column] as DatabaseValue).storage { return value }
        return nil
    }

    package static func string(_ row: Row, _ column: String) -> String? {
        if case .string(let value) = (row[column] as DatabaseValue).storage { return value }
        return nil
    }
}

/// A table as tokenguard makes it: the one description both creates it and checks a table found in a file.
package struct SQLiteTable: Sendable {
    package struct Column: Sendable, Equatable {
        // Compared by bytes: SQLite's names and types are bytes, and as Strings "ınteger" would pass once uppercased.
        package static func == (lhs: Column, rhs: Column) -> Bool {
            lhs.name.sameBytes(as: rhs.name) && lhs.type.sameBytes(as: rhs.type) && lhs.notNull == rhs.notNull
                && lhs.primaryKeyPosition == rhs.primaryKeyPosition
        }

        package let name: String
        /// `TEXT` or `INTEGER`, as declared.
        package let type: String
        package let notNull: Bool
        /// 1-based position in the primary key, 0 when not in it (as `PRAGMA table_info` reports).
        package let primaryKeyPosition: Int

        /// `TEXT NOT NULL`, at `key` in the primary key (0: not in it).
        package static func text(_ name: String, key: Int = 0) -> Column {
            Column(name: name, type: "TEXT", notNull: true, primaryKeyPosition: key)
        }
        /// `INTEGER NOT NULL`, at `key` in the primary key (0: not in it).
        package static func integer(_ name: String, key: Int = 0) -> Column {
            Column(name: name, type: "INTEGER", notNull: true, primaryKeyPosition: key)
        }
        /// An `INTEGER PRIMARY KEY` (the rowid: never NULL, though not declared so).
        package static func rowID(_ name: String) -> Column { Column(name: name, type: "INTEGER", notNull: false, primaryKeyPosition: 1) }
    }

    package let name: String
    package let columns: [Column]
    /// Table CHECK constraints (not visible to `PRAGMA table_info`, so not checked in a found table).
    package let checks: [String]
    /// Statements run after the table is made, in the same transaction (`INSERT OR IGNORE` of a required row).
    package let seed: String

    package init(_ name: String, _ columns: [Column], checks: [String] = [], seed: String = "") {
        self.name = name
        self.columns = columns
        self.checks = checks
        self.seed = seed
    }

    var createStatement: String {
        var parts = columns.map { "\($0.name) \($0.type)\($0.notNull ? " NOT NULL" : "")" }
        let key = columns.filter { $0.primaryKeyPosition > 0 }.sorted { $0.primaryKeyPosition < $1.primaryKeyPosition }.map(\.name)
        if !key.isEmpty { parts.append("PRIMARY KEY (\(key.joined(separator: ", ")))") }
        parts += checks.map { "CHECK (\($0))" }
        return "CREATE TABLE IF NOT EXISTS \(name) (\(parts.joined(separator: ", ")));\n" + seed
    }

    /// The table's columns as found in `db`, or nil when there is no such table.
    func found(in db: Database) throws -> [Column]? {
        let rows = try Row.fetchAll(db, sql: "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?)", arguments: [name])
        guard !rows.isEmpty else { return nil }
        return rows.map { row in
            Column(
                name: SQLiteValue.string(row, "name") ?? "", type: ASCII.uppercased(SQLiteValue.string(row, "type") ?? ""),
                notNull: SQLiteValue.int64(row, "notnull") == 1, primaryKeyPosition: Int(SQLiteValue.int64(row, "pk") ?? -1))
        }
    }
}

/// Opening a SQLite file that several processes may open at the same instant (replicas starting together,
/// `tokenguard revoke` beside a server), or that someone else made.
package enum SQLiteFile {
    /// Opens `path` (creating the file if needed) with `tables` in it.
    ///
    /// - A file whose tables are all there, each exactly as described, is used as it is, without a write: a
    ///   read-only file still opens.
    /// - Missing tables are made in one IMMEDIATE transaction, so a second process waits for the first one's commit
    ///   and then finds them made. (GRDB's migrator checked what was applied before it took the write lock, so two
    ///   first starts on one new file both ran `CREATE TABLE` and one of them failed.) `migrations` are recorded in
    ///   GRDB's `grdb_migrations` as well, so a tokenguard that still uses the migrator opens the file too.
    /// - A table of the same name with other columns, types, NOT NULLs or primary key is refused: writes into it
    ///   could succeed and never be read back as the same records (a revocation stored as text is skipped by every
    ///   reader, a version row without its key never replaced).
    package static func open(_ path: String, tables: [SQLiteTable], migrations: [String]) throws -> DatabaseQueue {
        var configuration = GRDB.Configuration()
        configuration.busyMode = .timeout(2)
        let database = try DatabaseQueue(path: path, configuration: configuration)
        if try database.read({ db in try complete(tables, in: db) }) { return database }
        try database.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                guard try !complete(tables, in: db) else { return .commit }
                try db.execute(sql: tables.map(\.createStatement).joined())
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
                for migration in migrations {
                    try db.execute(sql: "INSERT OR IGNORE INTO grdb_migrations (identifier) VALUES (?)", arguments: [migration])
                }
                guard try complete(tables, in: db) else { throw SQLiteSchemaError("\(path): the tables were not made as described") }
                return .commit
            }
        }
        return database
    }

    /// True when every table is there as described; false when one is missing; throws for one that differs.
    static func complete(_ tables: [SQLiteTable], in db: Database) throws -> Bool {
        var allThere = true
        for table in tables {
            guard let columns = try table.found(in: db) else {
                allThere = false
                continue
            }
            guard columns == table.columns else {
                let found = columns.map {
                    "\($0.name) \($0.type)\($0.notNull ? " NOT NULL" : "")\($0.primaryKeyPosition > 0 ? " key \($0.primaryKeyPosition)" : "")"
                }
                throw SQLiteSchemaError("table \(table.name) is not tokenguard's: it has (\(found.joined(separator: ", ")))")
            }
            // Neither visible to table_info nor made by tokenguard: a trigger could undo writes, and a key compared
            // other than byte for byte (NOCASE) would merge two subjects into one record.
            let triggers = try Int.fetchOne(
                db, sql: "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", arguments: [table.name])
            guard triggers == 0 else { throw SQLiteSchemaError("table \(table.name) has triggers, which tokenguard never makes") }
            let collations = try String.fetchAll(
                db,
                sql: """
                    SELECT x.coll FROM pragma_index_list(?) AS l, pragma_index_xinfo(l.name) AS x
                    WHERE l.origin = 'pk' AND x.key = 1 AND x.cid >= 0
                    """, arguments: [table.name])
            guard collations.allSatisfy({ ASCII.equalIgnoringCase($0, "BINARY") }) else {
                throw SQLiteSchemaError("table \(table.name) compares its key as \(collations.joined(separator: ", ")), not byte for byte")
            }
        }
        return allThere
    }
}

package struct SQLiteSchemaError: Error, CustomStringConvertible {
    package let description: String
    init(_ description: String) { self.description = description }
}
