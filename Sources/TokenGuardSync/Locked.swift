#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by a `pthread_mutex_t`: every access goes through ``withLock(_:)``.
///
/// Why not the standard library's `Synchronization.Mutex`: on this toolchain ThreadSanitizer cannot see its
/// lock and unlock (they happen in the uninstrumented runtime), so a TSan run reports every `Mutex`-guarded
/// access as a race, even in a trivially correct program; that would bury any real race. pthread mutexes are
/// intercepted by TSan, so `scripts/sanitize.sh thread` sees the real happens-before edges. The cost is one
/// allocation per lock, made once.
///
/// `@safe`: the mutex and value pointers are allocated in `init`, freed in `deinit`, and never leave the class.
@safe
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked Sendable: the value is only read or written with `mutex` held. Both are visible to inlinable code only,
    // so that a lock taken from another module is specialised there rather than called through generic accessors.
    // The value lives behind a pointer, as the mutex does: a class's stored `var` passed `inout` is checked for
    // exclusive access at run time (two runtime calls and a thread-local lookup per lock), which the lock already
    // guarantees.
    @usableFromInline let storage: UnsafeMutablePointer<Value>
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init(_ value: Value) {
        unsafe storage = UnsafeMutablePointer<Value>.allocate(capacity: 1)
        unsafe storage.initialize(to: value)
        unsafe mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        unsafe mutex.initialize(to: pthread_mutex_t())
        unsafe pthread_mutex_init(mutex, nil)
    }

    deinit {
        unsafe pthread_mutex_destroy(mutex)
        unsafe mutex.deinitialize(count: 1)
        unsafe mutex.deallocate()
        unsafe storage.deinitialize(count: 1)
        unsafe storage.deallocate()
    }

    /// Runs `body` with the value, holding the lock. Keep `body` short; never call out to unknown code.
    @inlinable
    public func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        lock()
        defer { unlock() }
        return try unsafe body(&storage.pointee)
    }

    @inlinable func lock() { unsafe pthread_mutex_lock(mutex) }
    @inlinable func unlock() { unsafe pthread_mutex_unlock(mutex) }
}
