import Synchronization
import TokenGuardCrypto
import TokenGuardSync

/// A bounded LRU cache of verified tokens, like Envoy's JWT filter offers: a token seen and verified recently
/// skips the signature check.
///
/// - Keyed by the whole token's bytes: the dictionary hashes them, then compares them exactly — never a hash
///   alone, and never Swift's `String ==`, which would find a canonically equivalent look-alike's entry.
/// - Positive verdicts only. On every hit the expiry is checked again against the current time and the
///   request's nonce is checked against the token's (constant-time), so a hit never accepts what a full
///   verification would refuse for those reasons.
/// - An entry is dropped when its key is no longer published as it was (material, kid, alg, issuer; checked on every hit)
///   or no longer alone under its kid, and a token without a `kid` when the key set changes at all: which key a fresh
///   check would take depends on the others.
/// - Not used for verification at a past time (`at`).
/// - Sharded (16 ways) so concurrent cores rarely contend for a lock.
public final class VerifiedTokenCache: Sendable {
    /// Immutable, and a class: a hit hands it out with one reference-count operation.
    final class Entry: Sendable {
        let verdict: Verdict
        /// nil for a token that named no key: only its own key set vouches for it (see `keySetGeneration`).
        let keyBinding: ByteKey?
        /// The token's `kid`: in another key set, the binding vouches only when that kid names one key alone (with
        /// several, a fresh check takes the first that verifies, whose issuer may refuse the token).
        let keyID: String?
        /// The ``KeySet/generation`` the key was found in: while that set is current, the key is published as it was.
        let keySetGeneration: UInt64
        let nonceClaim: String?
        let expiresAt: Int64
        /// The raw nonce this token was verified with: a hit with the same raw nonce needs no new hash. Kept
        /// in memory only, like the token itself.
        let verifiedRawNonce: String?

        init(
            verdict: Verdict, keyBinding: ByteKey?, keyID: String?, keySetGeneration: UInt64, nonceClaim: String?, expiresAt: Int64,
            verifiedRawNonce: String?
        ) {
            self.verdict = verdict
            self.keyBinding = keyBinding
            self.keyID = keyID
            self.keySetGeneration = keySetGeneration
            self.nonceClaim = nonceClaim
            self.expiresAt = expiresAt
            self.verifiedRawNonce = verifiedRawNonce
        }

        /// In a key set other than its own: its key is there as it was, and alone under its kid.
        func isVouchedFor(by keys: KeySet) -> Bool {
            guard let keyBinding, let keyID else { return false }
            return keys.bindings.contains(keyBinding) && keys.hasOneKey(withKeyID: keyID)
        }
    }

    /// The dictionary key: the whole token, compared exactly; hashed over its length and last 16 bytes (the end of
    /// the signature, about 96 random bits in base64url), which is enough to spread verified tokens and far cheaper
    /// than hashing all of it. Only verified tokens are ever stored, so an attacker cannot fill a bucket with colliding
    /// entries.
    struct TokenKey: Hashable {
        let token: String

        func hash(into hasher: inout Hasher) {
            let utf8 = token.utf8
            hasher.combine(utf8.count)
            guard utf8.count >= 16 else {
                for byte in utf8 { hasher.combine(byte) }
                return
            }
            // Two words rather than 16 bytes through `combine(bytes:)`, whose buffer path costs about twice as much.
            let (first, second) =
                utf8.withContiguousStorageIfAvailable(Self.tailWords) ?? Array(utf8.suffix(16)).withUnsafeBufferPointer(Self.tailWords)
            hasher.combine(first)
            hasher.combine(second)
        }

        /// The last 16 bytes (of at least 16) as two words.
        private static func tailWords(_ bytes: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64) {
            let tail = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[(bytes.count - 16)...])
            return (tail.loadUnaligned(as: UInt64.self), tail.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        }

        /// The whole token compared by the C library's vector `memcmp` (a cache hit compares about 1 KB: a word-at-a-time
        /// loop spent 0.7 k instructions on it).
        static func == (lhs: TokenKey, rhs: TokenKey) -> Bool {
            let inPlace = lhs.token.utf8.withContiguousStorageIfAvailable { left in
                rhs.token.utf8.withContiguousStorageIfAvailable { right in
                    MemoryCompare.equal(UnsafeRawBufferPointer(left), UnsafeRawBufferPointer(right))
                }
            }
            if let inPlace, let equal = inPlace { return equal }
            return lhs.token.sameBytes(as: rhs.token)
        }
    }

    /// One shard: a dictionary from token to slot, and a doubly linked recency list over the slots.
    struct Shard {
        var index: [TokenKey: Int32] = [:]
        var tokens: [String] = []
        var entries: [Entry?] = []
        var previous: [Int32] = []
        var next: [Int32] = []
        var head: Int32 = -1  // most recent
        var tail: Int32 = -1  // least recent
        var free: [Int32] = []

        mutating func unlink(_ slot: Int32) {
            let p = previous[Int(slot)]
            let n = next[Int(slot)]
            if p >= 0 { next[Int(p)] = n } else { head = n }
            if n >= 0 { previous[Int(n)] = p } else { tail = p }
        }

        mutating func pushFront(_ slot: Int32) {
            previous[Int(slot)] = -1
            next[Int(slot)] = head
            if head >= 0 { previous[Int(head)] = slot }
            head = slot
            if tail < 0 { tail = slot }
        }

        mutating func remove(_ slot: Int32) {
            unlink(slot)
            index[TokenKey(token: tokens[Int(slot)])] = nil
            tokens[Int(slot)] = ""
            entries[Int(slot)] = nil
            free.append(slot)
        }
    }

    public static let defaultCapacity = 100_000
    private static let shardCount = 16

    public let capacity: Int
    private let perShard: Int
    private let shards: [LockedShard]

    /// A shard behind its own lock (a class, since `Mutex` cannot sit in an array).
    final class LockedShard: Sendable {
        let state = Locked(Shard())
        func withLock<R>(_ body: (inout Shard) -> R) -> R { state.withLock { body(&$0) } }
    }

    /// - Parameter capacity: entries in all (default 100,000); 0 disables the cache.
    public init(capacity: Int = VerifiedTokenCache.defaultCapacity) {
        self.capacity = max(0, capacity)
        self.perShard = capacity == 0 ? 0 : max(1, (capacity + Self.shardCount - 1) / Self.shardCount)
        self.shards = (0..<Self.shardCount).map { _ in LockedShard() }
    }

    static func shard(for token: String) -> Int {
        // The last bytes of a JWS are its signature: well spread, and cheap to read (in place: walking a String's
        // UTF-8 view from its end costs ten times as much).
        let mix = { (bytes: UnsafeBufferPointer<UInt8>) in bytes.suffix(4).reduce(0) { $0 &* 31 &+ Int($1) } }
        let value = token.utf8.withContiguousStorageIfAvailable(mix) ?? Array(token.utf8.suffix(4)).withUnsafeBufferPointer(mix)
        return Int(UInt(bitPattern: value) % UInt(Self.shardCount))
    }

    /// The cached verdict, when the token is cached, not expired at `now` (with `leeway`) and its key is published in
    /// `keys` as it was (the set it was verified with, or one with its binding). The caller still checks the nonce. An
    /// expired or orphaned entry is dropped.
    func lookup(_ token: String, now: Int64, leeway: Int64, keys: KeySet) -> Entry? {
        guard perShard > 0 else { return nil }
        return shards[Self.shard(for: token)].withLock { shard -> Entry? in
            guard let slot = shard.index[TokenKey(token: token)], let entry = shard.entries[Int(slot)] else { return nil }
            guard now < entry.expiresAt + leeway, entry.keySetGeneration == keys.generation || entry.isVouchedFor(by: keys)
            else {
                shard.remove(slot)
                return nil
            }
            if shard.head != slot {
                shard.unlink(slot)
                shard.pushFront(slot)
            }
            return entry
        }
    }

    func store(_ token: String, _ entry: Entry) {
        guard perShard > 0 else { return }
        shards[Self.shard(for: token)].withLock { shard in
            if let slot = shard.index[TokenKey(token: token)] {
                shard.entries[Int(slot)] = entry
                return
            }
            let slot: Int32
            if let reused = shard.free.popLast() {
                slot = reused
            } else if shard.tokens.count < perShard {
                slot = Int32(shard.tokens.count)
                shard.tokens.append("")
                shard.entries.append(nil)
                shard.previous.append(-1)
                shard.next.append(-1)
            } else {
                // Full: evict the least recently used.
                let evicted = shard.tail
                shard.remove(evicted)
                slot = shard.free.removeLast()
            }
            shard.tokens[Int(slot)] = token
            shard.entries[Int(slot)] = entry
            shard.index[TokenKey(token: token)] = slot
            shard.pushFront(slot)
        }
    }

    /// Entries held now (for tests and metrics).
    public var count: Int { shards.reduce(0) { $0 + $1.withLock { $0.index.count } } }
}
