import Foundation
import Testing
import TokenGuardService
import TokenGuardSync

/// The worker threads that run blocking C calls (libcurl, hiredis) for async callers.
@Suite struct ThreadConfinedWorkersTests {
    @Test("a long queue behind a busy thread runs every job exactly once")
    func longQueue() async {
        let workers = ThreadConfinedWorkers<Int>(threads: 1, name: "test-workers") { 0 }
        defer { workers.shutdown() }
        let released = Locked(false)
        let blocker = Task {
            await workers.run { _ in
                // Holds the only thread until the test lets go (bounded: 10 s).
                for _ in 0..<10_000 where !released.withLock({ $0 }) { usleep(1000) }
                return -1
            }
        }
        let count = 5_000
        let runs = Locked(0)
        let results = await withTaskGroup(of: Int.self) { group in
            for index in 0..<count {
                group.addTask {
                    await workers.run { _ in
                        runs.withLock { $0 += 1 }
                        return index
                    }
                }
            }
            // Every job is queued behind the blocker before it lets go (bounded: 10 s).
            for _ in 0..<1000 where workers.queued < count { try? await Task.sleep(for: .milliseconds(10)) }
            released.withLock { $0 = true }
            var all: [Int] = []
            for await value in group { all.append(value) }
            return all
        }
        #expect(await blocker.value == -1)
        #expect(results.sorted() == Array(0..<count))
        #expect(runs.withLock { $0 } == count)
    }

    @Test("a job whose caller is cancelled before a thread takes it never runs")
    func cancelledBeforeItsTurn() async {
        let workers = ThreadConfinedWorkers<Int>(threads: 1, name: "test-workers") { 0 }
        defer { workers.shutdown() }
        let released = Locked(false)
        let ran = Locked(false)
        let blocking = Locked(false)
        let blocker = Task {
            await workers.run { _ in
                blocking.withLock { $0 = true }
                for _ in 0..<10_000 where !released.withLock({ $0 }) { usleep(1000) }
                return 0
            }
        }
        // The one thread is taken before the second job is queued (the two tasks may start in either order).
        for _ in 0..<1000 where !blocking.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(10)) }
        let waiting = Task {
            await workers.runUnlessCancelled(cancelled: -1) { _ in
                ran.withLock { $0 = true }
                return 1
            }
        }
        for _ in 0..<1000 where workers.queued < 1 { try? await Task.sleep(for: .milliseconds(10)) }
        waiting.cancel()
        released.withLock { $0 = true }
        _ = await blocker.value
        #expect(await waiting.value == -1)
        #expect(ran.withLock { $0 } == false)
    }
}
