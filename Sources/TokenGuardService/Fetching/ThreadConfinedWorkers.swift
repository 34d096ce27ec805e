import Foundation
import TokenGuardCore
import TokenGuardSync

/// A fixed set of threads, each owning one resource that never leaves it (a libcurl handle, a Redis
/// connection), running blocking jobs for `async` callers. Blocking C calls thus never run on Swift's
/// cooperative pool or an event loop; jobs queue when every thread is busy.
///
/// `@unchecked Sendable`: `jobs`, `head` and `stopping` are only touched under `condition`; each resource is created,
/// used and destroyed on its own thread.
package final class ThreadConfinedWorkers<Resource>: @unchecked Sendable {
    private let condition = NSCondition()
    /// Queued jobs from `head` on (taken slots are nil): taking one is O(1) however long the queue grows while the
    /// resource is slow (a paused Redis, an IdP not answering).
    private var jobs: [((Resource) -> Void)?] = []
    private var head = 0
    private var stopping = false

    /// Starts `threads` threads named `name-N`, each making its resource with `make` (on that thread).
    package init(threads: Int, name: String, make: @escaping @Sendable () -> Resource) {
        for index in 0..<max(1, threads) {
            // Each thread holds the workers until shutdown, then exits and releases its resource.
            let thread = Thread { self.loop(make()) }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    private func loop(_ resource: Resource) {
        while true {
            condition.lock()
            while head == jobs.count && !stopping { condition.wait() }
            if head == jobs.count && stopping {
                condition.unlock()
                return
            }
            let job = jobs[head]
            jobs[head] = nil
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 1024 && head * 2 >= jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job?(resource)
        }
    }

    /// Runs `body` on a worker thread with that thread's resource and returns its result.
    package func run<T: Sendable>(_ body: @escaping @Sendable (Resource) -> T) async -> T {
        await withCheckedContinuation { continuation in
            condition.lock()
            jobs.append { resource in continuation.resume(returning: body(resource)) }
            condition.signal()
            condition.unlock()
        }
    }

    /// The same, unless the calling task is cancelled before a thread takes the job: then `cancelled`, and `body` never
    /// runs (a request answered while its command waited for a connection sends nothing).
    package func runUnlessCancelled<T: Sendable>(cancelled: T, _ body: @escaping @Sendable (Resource) -> T) async -> T {
        let abandoned = Locked(false)
        return await withTaskCancellationHandler {
            await run { resource in abandoned.withLock { $0 } ? cancelled : body(resource) }
        } onCancel: {
            abandoned.withLock { $0 = true }
        }
    }

    /// Jobs waiting for a thread.
    package var queued: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count - head
    }

    /// Lets the threads finish queued work and exit.
    package func shutdown() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }
}
