/// "Tokens of this subject issued at or before `notBefore` are no longer accepted" (contract: Revocations).
public struct Revocation: Sendable, Equatable {
    public let provider: String
    public let subject: String
    /// Unix seconds.
    public let notBefore: Int64

    public init(provider: String, subject: String, notBefore: Int64) {
        self.provider = provider
        self.subject = subject
        self.notBefore = notBefore
    }

    /// Subjects are identities from tokens or from an admin: bytes, bounded; any byte but NUL, so that every subject
    /// a valid token can carry can be revoked.
    public static let maximumSubjectBytes = 1024

    public static func isValidSubject(_ subject: String) -> Bool {
        let count = subject.utf8.count
        guard count > 0, count <= maximumSubjectBytes else { return false }
        // In place: the generic walk of a String's UTF-8 view costs about thirty instructions a byte, on every verification.
        if let hasNUL = subject.utf8.withContiguousStorageIfAvailable({ ByteCompare.containsZero($0) }) { return !hasNUL }
        return !subject.utf8.contains(0)
    }
}

/// The revocations in force, one immutable snapshot, looked up by provider and subject bytes (a hash lookup per
/// verification; the snapshot is replaced whole when the store changes).
public struct RevocationSet: Sendable {
    private let notBefore: [ByteKey: Int64]

    public init(_ revocations: [Revocation] = []) {
        var table: [ByteKey: Int64] = [:]
        table.reserveCapacity(revocations.count)
        for revocation in revocations {
            let key = Self.key(revocation.provider, revocation.subject)
            table[key] = max(table[key] ?? Int64.min, revocation.notBefore)
        }
        notBefore = table
    }

    public var count: Int { notBefore.count }

    static func key(_ provider: String, _ subject: String) -> ByteKey {
        var bytes = Array(provider.utf8)
        bytes.append(0)
        bytes.append(contentsOf: subject.utf8)
        return ByteKey(bytes: bytes)
    }

    public func notBefore(provider: String, subject: String) -> Int64? { notBefore[Self.key(provider, subject)] }

    /// `token_revoked` when the verdict's `user_id` or `subject` has a revocation at or after the token's `iat`
    /// (or the token has no `iat`: nothing says it came after).
    public func check(_ verdict: Verdict) -> VerificationError? {
        guard !notBefore.isEmpty else { return nil }
        for subject in verdict.userID.sameBytes(as: verdict.subject) ? [verdict.userID] : [verdict.userID, verdict.subject] {
            guard let revokedAt = notBefore(provider: verdict.provider, subject: subject) else { continue }
            if let issuedAt = verdict.issuedAt, issuedAt > revokedAt { continue }
            return VerificationError(.tokenRevoked, "tokens of this subject issued at or before \(revokedAt) are revoked")
        }
        return nil
    }
}
