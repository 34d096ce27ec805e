import Foundation
import Logging
import Testing
import TokenGuardTestSupport

@testable import TokenGuardServer

/// `server.idle_poll_microseconds`: after each answer every allowed CPU's thread spins for the window, then sleeps
/// until the next answer; stopping ends them all.
struct IdlePollerTests {
    /// Waits (at most `seconds`) until `done` holds. The threads run at SCHED_IDLE, so on a machine busy with other
    /// suites they get their turn late: the steps wait for states, not for times.
    func waitUntil(seconds: Double, _ done: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !done() && Date() < deadline { try? await Task.sleep(for: .milliseconds(5)) }
        return done()
    }

    @Test("asleep until an answer, spinning for the window after it, asleep again; stop ends every thread")
    func spinsForTheWindowOnly() async {
        // A window long enough to see every thread awake inside it on a loaded machine.
        let poller = IdlePoller(window: 3_000_000, logger: Logger(label: "test"))
        #expect(poller.threadCount == IdlePoller.allowedCPUs().count)
        #expect(poller.threadCount >= 1)
        poller.start()
        #expect(await waitUntil(seconds: 10) { poller.spinningThreads == 0 }, "asleep before any answer")
        poller.answered()
        #expect(await waitUntil(seconds: 2.5) { poller.spinningThreads == poller.threadCount }, "every thread spins after an answer")
        #expect(await waitUntil(seconds: 15) { poller.spinningThreads == 0 }, "asleep again once the window has passed")
        // Woken again by the next answer.
        poller.answered()
        #expect(await waitUntil(seconds: 2.5) { poller.spinningThreads == poller.threadCount })
        poller.stop()
        #expect(poller.spinningThreads == 0, "stop returns once every thread has ended")
        // Answers after the stop wake nothing.
        poller.answered()
        #expect(poller.spinningThreads == 0)
    }

    @Test("stopping while the threads spin ends them too")
    func stopWhileSpinning() async {
        let poller = IdlePoller(window: 60_000_000, logger: Logger(label: "test"))
        poller.start()
        poller.answered()
        _ = await waitUntil(seconds: 2.5) { poller.spinningThreads == poller.threadCount }
        poller.stop()
        #expect(poller.spinningThreads == 0)
    }

    @Test("a thread pinned to each allowed CPU: the affinity calls resolve")
    func affinityCallsResolve() {
        #expect(IdlePoller.affinityCall("sched_getaffinity") != nil)
        #expect(IdlePoller.affinityCall("sched_setaffinity") != nil)
        #expect(!IdlePoller.allowedCPUs().isEmpty)
    }
}
