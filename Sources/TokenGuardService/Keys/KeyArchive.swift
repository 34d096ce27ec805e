import Foundation
import GRDB
import TokenGuardCore

/// The keys fetched, per provider, in SQLite (the embedded default; contract: `key_archive`): every key version, up to
/// the 1,000 most recently seen per provider.
///
/// Serves two things: restarting during an IdP outage (keys seen recently are usable until the first fetch
/// succeeds) and verifying logged tokens as of a past time (`at`), with keys that have since been rotated out.
/// A key whose material changes under the same `kid` is a new row: both versions are kept.
/// Writes happen after fetches, never on the verification path.
///
/// Every key is recorded with its source — where it was fetched (``JWKSKeySource/archiveSource``) — and read back only
/// for that same source. A provider name is only a label in a config file: re-pointed at another IdP (a development
/// IdP's config promoted to production beside the same file, another tenant), it must not inherit the keys the old
/// one published, or whoever holds the old IdP's private key signs tokens the new configuration accepts.
package final class KeyArchive: Sendable {
    /// One archived key version.
    package struct Entry: Sendable, Equatable {
        package let provider: String
        /// Where the key was fetched (``JWKSKeySource/archiveSource``).
        package let source: String
        package let keyID: String
        package let thumbprint: String
        /// The JWK as published (JSON text).
        package let jwk: String
        package let firstSeen: Int64
        package let lastSeen: Int64
    }

    package let path: String
    private let database: DatabaseQueue

    /// Opens (creating if needed) the archive at `path`. Throws if the file is not a usable SQLite database.
    package init(path: String) throws {
        self.path = path
        database = try SQLiteFile.open(path, tables: Self.tables, migrations: ["v1", "v2-tenant-names", "v3-key-sources"])
    }

    /// Keys live in `key_versions`. The `keys` table of earlier versions recorded no source, so its rows cannot be told
    /// apart from another IdP's: it is left as it is and never read.
    static let tables = [
        SQLiteTable(
            "key_versions",
            [
                .text("provider", key: 1), .text("source", key: 2), .text("kid", key: 3), .text("thumbprint", key: 4), .text("jwk"),
                .integer("first_seen"), .integer("last_seen"),
            ]),
        SQLiteTable("tenant_names", [.text("authority", key: 1), .text("name", key: 2), .text("tenant_id"), .integer("resolved_at")]),
    ]

    /// Records that the tenant `name` (a domain) resolved to `tenantID` at `authority`.
    package func recordTenant(authority: String, name: String, tenantID: String, at time: Int64) throws {
        try database.write { db in
            try db.execute(
                sql: """
                    INSERT INTO tenant_names (authority, name, tenant_id, resolved_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT (authority, name) DO UPDATE SET tenant_id = excluded.tenant_id, resolved_at = excluded.resolved_at
                    """, arguments: [authority, name, tenantID, time])
        }
    }

    /// Tenant names resolved before at `authority` (a damaged row is skipped).
    package func tenants(authority: String) throws -> [String: String] {
        try database.read { db in
            var result: [String: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT name, tenant_id FROM tenant_names WHERE authority = ?", arguments: [authority]) {
                guard let name = SQLiteValue.string(row, "name"), let tenantID = SQLiteValue.string(row, "tenant_id"), GUID.isValid(tenantID)
                else { continue }
                result[name] = tenantID
            }
            return result
        }
    }

    /// Records that `keys` were published by `provider`'s key source `source` at `seenAt` (Unix seconds).
    /// Keeps the ``maximumKeysPerProvider`` most recently seen versions of each provider's keys, whatever their source.
    package func record(provider: String, source: String, keys: [VerificationKey], seenAt: Int64) throws {
        try database.write { db in
            for key in keys {
                try db.execute(
                    sql: """
                        INSERT INTO key_versions (provider, source, kid, thumbprint, jwk, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (provider, source, kid, thumbprint) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen)
                        """,
                    arguments: [provider, source, key.keyID ?? "", key.thumbprint, JSONWriter.string(.object(key.jwk)), seenAt, seenAt])
            }
            try db.execute(
                sql: """
                    DELETE FROM key_versions WHERE provider = ? AND (source, kid, thumbprint) NOT IN
                    (SELECT source, kid, thumbprint FROM key_versions WHERE provider = ? ORDER BY last_seen DESC, first_seen DESC LIMIT ?)
                    """, arguments: [provider, provider, Self.maximumKeysPerProvider])
        }
    }

    /// An IdP that publishes new keys on every fetch must not grow the archive, nor the retired keys each fetch
    /// re-reads into memory, without end; a real provider rotates a few keys a year.
    package static let maximumKeysPerProvider = 1_000

    /// Every archived key of `provider` fetched from `source` (nil: from any source, for listing only, never for
    /// verifying), optionally only those last seen at or after `since`.
    package func entries(provider: String, source: String?, lastSeenSince since: Int64 = 0) throws -> [Entry] {
        try database.read { db in
            // Compared as bytes (SQLite's `=` on TEXT is BINARY unless told otherwise): two sources differ by any byte.
            let rows =
                if let source {
                    try Row.fetchAll(
                        db, sql: "SELECT * FROM key_versions WHERE provider = ? AND source = ? AND last_seen >= ? ORDER BY kid, first_seen",
                        arguments: [provider, source, since])
                } else {
                    try Row.fetchAll(
                        db, sql: "SELECT * FROM key_versions WHERE provider = ? AND last_seen >= ? ORDER BY source, kid, first_seen",
                        arguments: [provider, since])
                }
            return rows.compactMap { row -> Entry? in
                // A damaged row (NULLs, wrong types, times out of range) is skipped: GRDB's non-optional reads
                // would trap, and the archive is a file anyone with disk access can edit.
                guard let provider = SQLiteValue.string(row, "provider"), let rowSource = SQLiteValue.string(row, "source"),
                    source == nil || rowSource.sameBytes(as: source ?? ""), let keyID = SQLiteValue.string(row, "kid"),
                    let thumbprint = SQLiteValue.string(row, "thumbprint"), let jwk = SQLiteValue.string(row, "jwk"),
                    let firstSeen = SQLiteValue.int64(row, "first_seen"), let lastSeen = SQLiteValue.int64(row, "last_seen"),
                    firstSeen >= 86_400, firstSeen <= lastSeen, lastSeen <= NumericDate.maximum
                else { return nil }
                return Entry(
                    provider: provider, source: rowSource, keyID: keyID, thumbprint: thumbprint, jwk: jwk, firstSeen: firstSeen,
                    lastSeen: lastSeen)
            }
        }
    }
}

extension KeyArchive.Entry {
    /// The archived key as a verification key. With `window`, usable only for tokens issued between one day
    /// before it was first seen and when it was last seen (a key is published ahead of first use).
    package func verificationKey(window: Bool) -> VerificationKey? {
        guard let object = try? JSONParser.parseObject(Array(jwk.utf8)), case .success(let key) = JWKParser.parse(object) else { return nil }
        return window ? key.withPublishedWindow((firstSeen - 86_400)...lastSeen) : key
    }
}
