import Synchronization

/// The JOSE headers of tokens that verified, by their encoded bytes: a provider signs with a handful of keys, so its
/// tokens carry a handful of distinct headers, and one seen before need not be decoded and parsed again.
///
/// Only a header whose token verified is kept (a forger cannot fill it), at most ``capacity`` of them, first come
/// first kept; it lives in a ``KeySet``, so it starts empty when the keys change. A header is served only for the
/// exact bytes it was parsed from, and parsing is deterministic, so a hit is the same header a parse would give.
/// Slots are written once and read without a lock (every verification reads them, from any thread).
public final class VerifiedHeaders: Sendable {
    public static let capacity = 4
    /// Longest encoded header kept (a real one is under 200 bytes).
    static let maximumEncodedBytes = 512

    private final class Entry: Sendable {
        let encoded: [UInt8]
        let header: JOSEHeader
        init(encoded: [UInt8], header: JOSEHeader) {
            self.encoded = encoded
            self.header = header
        }
    }

    // Each slot: 0, or a retained Entry that this object releases when it dies. Four fields rather than an array:
    // an atomic cannot be copied into one.
    private let slot0 = Atomic<UInt>(0)
    private let slot1 = Atomic<UInt>(0)
    private let slot2 = Atomic<UInt>(0)
    private let slot3 = Atomic<UInt>(0)

    public init() {}

    deinit {
        for index in 0..<Self.capacity { entry(at: index).map { Unmanaged.passUnretained($0).release() } }
    }

    private func withSlot<R>(_ index: Int, _ body: (borrowing Atomic<UInt>) -> R) -> R {
        switch index {
        case 0: body(slot0)
        case 1: body(slot1)
        case 2: body(slot2)
        default: body(slot3)
        }
    }

    private func entry(at index: Int) -> Entry? {
        let bits = withSlot(index) { $0.load(ordering: .acquiring) }
        guard let pointer = UnsafeRawPointer(bitPattern: bits) else { return nil }
        return Unmanaged<Entry>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// The header parsed from exactly these encoded bytes, if one is kept.
    func header(encoded: UnsafeBufferPointer<UInt8>) -> JOSEHeader? {
        for index in 0..<Self.capacity {
            guard let entry = entry(at: index) else { continue }
            let equal = entry.encoded.withUnsafeBufferPointer { kept in
                kept.count == encoded.count && ByteCompare.equal(UnsafeRawBufferPointer(kept), UnsafeRawBufferPointer(encoded))
            }
            if equal { return entry.header }
        }
        return nil
    }

    /// Keeps `header`, parsed from `encoded`, when there is room and it is not kept already.
    package func keep(_ header: JOSEHeader, encoded: ArraySlice<UInt8>) {
        guard encoded.count <= Self.maximumEncodedBytes else { return }
        if encoded.withUnsafeBufferPointer({ self.header(encoded: $0) }) != nil { return }
        let retained = Unmanaged.passRetained(Entry(encoded: Array(encoded), header: header))
        let bits = UInt(bitPattern: retained.toOpaque())
        for index in 0..<Self.capacity {
            if withSlot(index, { $0.compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing).exchanged }) { return }
            // Another thread may have just kept the same header: one slot for it is enough.
            if let other = entry(at: index), other.encoded.elementsEqual(encoded) { break }
        }
        retained.release()
    }

    /// How many headers are kept (for tests and reports).
    public var count: Int { (0..<Self.capacity).filter { entry(at: $0) != nil }.count }
}
