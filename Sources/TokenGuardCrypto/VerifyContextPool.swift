import COpenSSL
import Synchronization

/// A key's idle verification contexts, per algorithm, taken and put back without a lock.
///
/// Each slot holds 0 or the address of an idle context; a verification takes one with an atomic exchange and puts it
/// back with a compare-and-exchange, one atomic operation each. A mutex costs two to take and two to release, twice per
/// verification, and two threads verifying with the same key contend for it. A context is used by the one
/// verification that took it: the exchange hands it over whole (acquiring what the releasing put-back wrote).
///
/// An algorithm's slots are made on its first use (a key is used with one algorithm), published with a
/// compare-and-exchange so that two first uses at once keep one set. Everything is freed when the key is: no
/// verification can hold a context then, since it holds the key.
@safe
final class VerifyContextPool: @unchecked Sendable {
    // @unchecked Sendable: the slots are only touched through atomics; a context's pointers belong to whoever took it.

    /// An idle pooled context: an `EVP_PKEY_CTX` initialised for `EVP_PKEY_verify`, and an `EVP_MD_CTX` to hash the
    /// signing input in (reinitialised per use, which costs less than making one).
    @safe struct Context {
        let verify: OpaquePointer
        let digest: OpaquePointer
    }

    /// Idle contexts kept per algorithm; a verification finding every slot full frees its context instead.
    static let slotsPerAlgorithm = 64

    /// Per algorithm (by ``SignatureAlgorithm/ordinal``): 0, or the address of its slots.
    private let directory: UnsafeMutablePointer<Atomic<UInt>>
    private let algorithmCount = SignatureAlgorithm.allCases.count

    init() {
        unsafe directory = UnsafeMutablePointer<Atomic<UInt>>.allocate(capacity: algorithmCount)
        for index in 0..<algorithmCount { unsafe (directory + index).initialize(to: Atomic(0)) }
    }

    deinit {
        freeIdleContexts()
        for index in 0..<algorithmCount {
            guard let slots = unsafe slots(index) else { continue }
            unsafe slots.deinitialize(count: Self.slotsPerAlgorithm)
            unsafe slots.deallocate()
        }
        unsafe directory.deinitialize(count: algorithmCount)
        unsafe directory.deallocate()
    }

    /// Frees every idle context (the key frees them before itself: each was made from it).
    func freeIdleContexts() {
        for index in 0..<algorithmCount {
            guard let slots = unsafe slots(index) else { continue }
            for slot in 0..<Self.slotsPerAlgorithm {
                let bits = unsafe slots[slot].exchange(0, ordering: .acquiring)
                if let box = unsafe UnsafeMutablePointer<Context>(bitPattern: bits) { unsafe Self.free(box) }
            }
        }
    }

    /// An idle context for `algorithm`, now the caller's alone; nil when none is idle.
    func take(_ algorithm: SignatureAlgorithm) -> UnsafeMutablePointer<Context>? {
        guard let slots = unsafe slots(algorithm.ordinal) else { return nil }
        for slot in 0..<Self.slotsPerAlgorithm {
            // A plain look first: an empty slot costs no exclusive access to its line.
            guard unsafe slots[slot].load(ordering: .relaxed) != 0 else { continue }
            let bits = unsafe slots[slot].exchange(0, ordering: .acquiring)
            if let box = unsafe UnsafeMutablePointer<Context>(bitPattern: bits) { return unsafe box }
        }
        return nil
    }

    /// Puts `box` back for the next verification, or frees it when every slot is full.
    func put(_ box: UnsafeMutablePointer<Context>, _ algorithm: SignatureAlgorithm) {
        let slots = unsafe madeSlots(algorithm.ordinal)
        let bits = UInt(bitPattern: box)
        for slot in 0..<Self.slotsPerAlgorithm {
            guard unsafe slots[slot].load(ordering: .relaxed) == 0 else { continue }
            if unsafe slots[slot].compareExchange(expected: 0, desired: bits, ordering: .releasing).exchanged { return }
        }
        unsafe Self.free(box)
    }

    /// A new context in a box of its own (the box goes in and out of the slots with it).
    static func make(verify: OpaquePointer, digest: OpaquePointer) -> UnsafeMutablePointer<Context> {
        let box = UnsafeMutablePointer<Context>.allocate(capacity: 1)
        unsafe box.initialize(to: Context(verify: verify, digest: digest))
        return unsafe box
    }

    static func free(_ box: UnsafeMutablePointer<Context>) {
        unsafe EVP_PKEY_CTX_free(box.pointee.verify)
        unsafe EVP_MD_CTX_free(box.pointee.digest)
        unsafe box.deinitialize(count: 1)
        unsafe box.deallocate()
    }

    private func slots(_ index: Int) -> UnsafeMutablePointer<Atomic<UInt>>? {
        unsafe UnsafeMutablePointer<Atomic<UInt>>(bitPattern: directory[index].load(ordering: .acquiring))
    }

    /// The algorithm's slots, made now when this is its first use.
    private func madeSlots(_ index: Int) -> UnsafeMutablePointer<Atomic<UInt>> {
        if let existing = unsafe slots(index) { return unsafe existing }
        let made = UnsafeMutablePointer<Atomic<UInt>>.allocate(capacity: Self.slotsPerAlgorithm)
        for slot in 0..<Self.slotsPerAlgorithm { unsafe (made + slot).initialize(to: Atomic(0)) }
        let (exchanged, original) = unsafe directory[index].compareExchange(
            expected: 0, desired: UInt(bitPattern: made), ordering: .acquiringAndReleasing)
        if exchanged { return unsafe made }
        // Another first use published its slots first: those are the algorithm's.
        unsafe made.deinitialize(count: Self.slotsPerAlgorithm)
        unsafe made.deallocate()
        return unsafe UnsafeMutablePointer<Atomic<UInt>>(bitPattern: original)!
    }
}
