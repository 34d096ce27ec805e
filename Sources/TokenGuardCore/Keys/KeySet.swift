import Synchronization
import TokenGuardCrypto

/// An immutable set of parsed verification keys: what a key source hands the verifier.
///
/// Built once per JWKS document and shared by every verification until replaced; lookups read it
/// with no locks and no parsing.
public final class KeySet: Sendable {
    /// Largest JWKS document accepted (contract: 1 MiB); larger ones are refused unparsed.
    public static let maximumDocumentBytes = 1 << 20
    /// Keys beyond this count in one document are ignored; real providers publish fewer than ten.
    public static let maximumKeys = 100

    public let keys: [VerificationKey]
    public let skipped: [JWKParser.Skipped]
    /// Keys grouped by the bytes of their `kid`, in document order: a token's kid selects a key only when its bytes
    /// are identical. Searched in order rather than hashed: a provider publishes a handful of keys, and comparing
    /// bytes in place costs less than hashing a copy of the token's kid.
    private let byKeyID: [(keyID: String, keys: [VerificationKey])]
    /// RFC 7638 thumbprints of every key, to tell whether a cached verdict's key is still published.
    public let thumbprints: Set<String>
    /// Every key's ``VerificationKey/binding``: a cached verdict is served only while its key is published as it was.
    public let bindings: Set<ByteKey>
    /// Headers of tokens that verified with these keys (gone with them when the keys change).
    public let verifiedHeaders = VerifiedHeaders()
    /// Unique to this set in the process, never reused (a counter, not an address): a cached verdict made with this
    /// set needs no binding lookup while it is current.
    public let generation = KeySet.nextGeneration.add(1, ordering: .relaxed).newValue
    private static let nextGeneration = Atomic<UInt64>(0)

    public init(keys: [VerificationKey], skipped: [JWKParser.Skipped] = []) {
        self.keys = keys
        self.skipped = skipped
        var groups: [(keyID: String, keys: [VerificationKey])] = []
        for key in keys {
            guard let kid = key.keyID else { continue }
            if let index = groups.firstIndex(where: { $0.keyID.sameBytes(as: kid) }) {
                groups[index].keys.append(key)
            } else {
                groups.append((kid, [key]))
            }
        }
        self.byKeyID = groups
        self.thumbprints = Set(keys.map(\.thumbprint))
        self.bindings = Set(keys.map(\.binding))
    }

    public static let empty = KeySet(keys: [])

    /// Parses a JWKS document (`{"keys": [...]}`), skipping unusable keys and recording why.
    public static func parse(jwks bytes: [UInt8]) throws(VerificationError) -> KeySet {
        guard bytes.count <= maximumDocumentBytes else {
            throw VerificationError(.keysUnavailable, "JWKS document is \(bytes.count) bytes; the limit is \(maximumDocumentBytes)")
        }
        let document: JSONObject
        do {
            document = try JSONParser.parseObject(bytes)
        } catch {
            throw VerificationError(.keysUnavailable, "JWKS document is not a valid JSON object: \(error)")
        }
        guard let list = document["keys"]?.arrayValue else {
            throw VerificationError(.keysUnavailable, "JWKS document has no \"keys\" array")
        }
        var keys: [VerificationKey] = []
        var skipped: [JWKParser.Skipped] = []
        for entry in list.prefix(maximumKeys) {
            guard let jwk = entry.objectValue else {
                skipped.append(JWKParser.Skipped(keyID: nil, reason: "entry is not a JSON object"))
                continue
            }
            switch JWKParser.parse(jwk) {
            case .success(let key): keys.append(key)
            case .failure(let reason): skipped.append(reason)
            }
        }
        // Said, not dropped silently: one entry for all of them (a JWKS of thousands stays one line in the report).
        if list.count > maximumKeys {
            skipped.append(
                JWKParser.Skipped(
                    keyID: nil,
                    reason:
                        "\(list.count - maximumKeys) more \(list.count - maximumKeys == 1 ? "key" : "keys") beyond the first \(maximumKeys) not read")
            )
        }
        return KeySet(keys: keys, skipped: skipped)
    }

    /// The keys that may verify a token with this `kid` and algorithm.
    ///
    /// With a `kid`, only keys carrying that exact `kid` are candidates. Without one, a key is chosen only
    /// when exactly one key in the set fits the algorithm; tokenguard never tries every key in turn.
    public func candidates(keyID: String?, algorithm: SignatureAlgorithm) -> [VerificationKey] {
        if let keyID { return keys(withKeyID: keyID) ?? [] }
        let fitting = keys.filter { $0.permits(algorithm) }
        return fitting.count == 1 ? fitting : []
    }

    public func contains(keyID: String) -> Bool { keys(withKeyID: keyID) != nil }

    /// True when exactly one key has this kid (bytes).
    public func hasOneKey(withKeyID keyID: String) -> Bool { keys(withKeyID: keyID)?.count == 1 }

    private func keys(withKeyID keyID: String) -> [VerificationKey]? {
        for group in byKeyID where group.keyID.sameBytes(as: keyID) { return group.keys }
        return nil
    }

    /// Why a key with this kid (bytes) was skipped when the JWKS was loaded, if it was.
    public func skipReason(keyID: String) -> String? {
        skipped.first { $0.keyID.map { $0.sameBytes(as: keyID) } ?? false }?.reason
    }
}

extension [JWKParser.Skipped] {
    /// `[{"kid", "reason"}]`, as `/v1/providers` and `tokenguard keys` show skipped keys.
    public var json: JSONValue {
        // The kid is the provider's text: shown capped in bytes (real kids are far shorter).
        .array(map { .object(JSONObject([("kid", $0.keyID.map { .string($0.excerpt(bytes: 256)) } ?? .null), ("reason", .string($0.reason))])) })
    }
}
