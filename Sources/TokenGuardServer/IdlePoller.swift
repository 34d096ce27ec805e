import Foundation
import Logging
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps the CPUs this process may run on from idling for a short window after each answer: one thread per CPU,
/// pinned to it, spins at the lowest scheduling priority (`SCHED_IDLE`) until `window` has passed since the last
/// answer, then sleeps until the next one. `server.idle_poll_microseconds`; off by default.
///
/// Why: a virtual machine whose kernel halts an idle virtual CPU at once (a KVM guest with
/// `haltpoll.guest_halt_poll_ns=0`, as on Firecracker) makes a request that arrives while the server's CPU is halted
/// wait until the hypervisor runs that CPU again. On such a machine that wait was the whole latency tail at moderate
/// load: one server core, 500 requests a second, p99 4–12 ms, and 0.7 ms with any low-priority busy loop on that core.
/// The event loop, at normal priority, preempts the spinning thread as soon as it has work, so the work itself is not
/// slowed. The price is CPU time: up to `window` of every allowed CPU after each answer, which at steady moderate load
/// is all of their idle time, and which counts against a container's CPU quota (hence off by default).
package final class IdlePoller: Service, @unchecked Sendable {
    /// One spinning thread's handshake with ``answered()``: set while the thread sleeps; whoever clears it wakes it.
    private final class Spinner: Sendable {
        let cpu: Int
        let sleeping = Atomic<Bool>(false)
        let wake = DispatchSemaphore(value: 0)
        init(cpu: Int) { self.cpu = cpu }
    }

    private let windowNanoseconds: Int64
    private let spinners: [Spinner]
    private let logger: Logger
    /// Monotonic nanoseconds of the last answer.
    private let lastAnswer = Atomic<Int64>(0)
    private let stopped = Atomic<Bool>(false)
    /// Threads that run and are not asleep: spinning, or on their way to sleep (tests watch it).
    private let awake = Atomic<Int>(0)
    private let finished = DispatchSemaphore(value: 0)
    private let started = Atomic<Int>(0)

    /// At most this many CPUs get a spinning thread (the first of the allowed ones).
    static let maximumThreads = 64

    package init(window microseconds: Int, logger: Logger) {
        windowNanoseconds = Int64(max(0, microseconds)) * 1000
        spinners = Self.allowedCPUs().prefix(Self.maximumThreads).map(Spinner.init)
        self.logger = logger
    }

    /// Called when an answer has been written: the window starts again, and sleeping threads spin.
    @inline(__always)
    package func answered() {
        lastAnswer.store(Self.now(), ordering: .sequentiallyConsistent)
        for spinner in spinners where spinner.sleeping.load(ordering: .sequentiallyConsistent) {
            if spinner.sleeping.exchange(false, ordering: .sequentiallyConsistent) { spinner.wake.signal() }
        }
    }

    /// Threads currently spinning (or about to sleep).
    package var spinningThreads: Int { awake.load(ordering: .sequentiallyConsistent) }
    /// Threads started (one per allowed CPU, up to ``maximumThreads``).
    package var threadCount: Int { spinners.count }

    package func run() async throws {
        start()
        try? await gracefulShutdown()
        stop()
    }

    /// Starts the threads (they sleep until the first answer).
    package func start() {
        guard started.exchange(1, ordering: .sequentiallyConsistent) == 0 else { return }
        for spinner in spinners {
            awake.add(1, ordering: .sequentiallyConsistent)
            let thread = Thread { [self] in
                spin(spinner)
                finished.signal()
            }
            thread.name = "tokenguard-idle-poll-\(spinner.cpu)"
            thread.start()
        }
        logger.info(
            "keeping CPUs from idling after each answer",
            metadata: ["cpus": "\(spinners.map(\.cpu))", "window_us": "\(windowNanoseconds / 1000)"])
    }

    /// Stops the threads and waits for them to end (they end within one turn of their loop).
    package func stop() {
        guard started.load(ordering: .sequentiallyConsistent) == 1, !stopped.exchange(true, ordering: .sequentiallyConsistent) else { return }
        for spinner in spinners where spinner.sleeping.exchange(false, ordering: .sequentiallyConsistent) { spinner.wake.signal() }
        for _ in spinners { finished.wait() }
    }

    private func spin(_ spinner: Spinner) {
        defer { awake.subtract(1, ordering: .sequentiallyConsistent) }
        // Pinned to its CPU (the one it keeps running), and below every normal thread: a thread that may not run at
        // SCHED_IDLE would take half of its CPU from the server, so it does not run at all.
        guard Self.pin(to: spinner.cpu) else {
            logger.warning("idle polling: could not pin a thread to its CPU; that CPU is not kept busy", metadata: ["cpu": "\(spinner.cpu)"])
            return
        }
        guard Self.lowestPriority() else {
            logger.warning("idle polling: SCHED_IDLE refused; that CPU is not kept busy", metadata: ["cpu": "\(spinner.cpu)"])
            return
        }
        // Asleep until the first answer.
        var last = lastAnswer.load(ordering: .sequentiallyConsistent)
        var sleepNow = true
        while !stopped.load(ordering: .relaxed) {
            if !sleepNow {
                last = lastAnswer.load(ordering: .relaxed)
                if Self.now() &- last < windowNanoseconds { continue }
            }
            sleepNow = false
            awake.subtract(1, ordering: .sequentiallyConsistent)
            spinner.sleeping.store(true, ordering: .sequentiallyConsistent)
            // An answer (or a stop) after `last` was read but before the flag was up did not see it: look again.
            if lastAnswer.load(ordering: .sequentiallyConsistent) != last || stopped.load(ordering: .sequentiallyConsistent) {
                // Whoever cleared the flag first signals; if it was not this thread, that signal is taken here.
                if !spinner.sleeping.exchange(false, ordering: .sequentiallyConsistent) { spinner.wake.wait() }
            } else {
                spinner.wake.wait()
            }
            awake.add(1, ordering: .sequentiallyConsistent)
        }
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    @inline(__always)
    static func now() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Int64(spec.tv_sec) &* 1_000_000_000 &+ Int64(spec.tv_nsec)
    }

    /// The CPUs this process may run on (its affinity mask), in order.
    static func allowedCPUs() -> [Int] {
        var set = cpu_set_t()
        guard let getAffinity = affinityCall("sched_getaffinity"), getAffinity(0, MemoryLayout<cpu_set_t>.size, &set) == 0 else {
            return []
        }
        return withUnsafeBytes(of: &set) { bytes in
            (0..<(bytes.count * 8)).filter { bytes[$0 / 8] & (1 << UInt8($0 % 8)) != 0 }
        }
    }

    /// Pins the calling thread to `cpu`.
    static func pin(to cpu: Int) -> Bool {
        var set = cpu_set_t()
        guard cpu >= 0, cpu < MemoryLayout<cpu_set_t>.size * 8 else { return false }
        withUnsafeMutableBytes(of: &set) { bytes in bytes[cpu / 8] |= 1 << UInt8(cpu % 8) }
        guard let setAffinity = affinityCall("sched_setaffinity") else { return false }
        return setAffinity(0, MemoryLayout<cpu_set_t>.size, &set) == 0
    }

    /// `int sched_{get,set}affinity(pid_t, size_t, cpu_set_t *)`: 0 is the calling thread.
    typealias AffinityCall = @convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32

    /// glibc's affinity calls, looked up by name: <sched.h> declares them only with _GNU_SOURCE, which Swift's Glibc
    /// module is not built with.
    static func affinityCall(_ name: String) -> AffinityCall? {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(symbol, to: AffinityCall.self)
    }

    /// Puts the calling thread in SCHED_IDLE (Linux: runs only when nothing else on its CPU wants to).
    static func lowestPriority() -> Bool {
        var parameters = sched_param()
        parameters.sched_priority = 0
        return sched_setscheduler(0, schedIdle, &parameters) == 0
    }

    /// `SCHED_IDLE` from <sched.h>, which Swift imports only with _GNU_SOURCE.
    static let schedIdle: Int32 = 5
}
