import Testing
import TokenGuardSync

@testable import TokenGuardServer

/// The record a batch answered at its deadline is made from: a claimed verdict is never left out of the answer.
struct BatchProgressTests {
    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("closing waits for items that took a claim; items without one are left out after; no claim is admitted after")
    func closeAccountsForClaims() async throws {
        let progress = VerifyRoutes.BatchProgress(count: 4)
        progress.record(0, bytes("a"))  // finished in time
        #expect(progress.holdClaim(1))  // claim held, verdict not recorded yet
        let closed = Locked<[[UInt8]?]?>(nil)
        let closing = Task {
            let verdicts = await progress.close()
            closed.withLock { $0 = verdicts }
        }
        // The close is waiting on item 1; meanwhile no claim gets through and a verdict without a claim is not kept.
        // Waited for as a state, not a pause: a loaded machine may not have run the closing task after any fixed delay.
        let deadline = ContinuousClock.now + .seconds(60)
        while progress.isOpen && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(!progress.isOpen)
        #expect(closed.withLock { $0 } == nil, "closed before the claimed item recorded its verdict")
        #expect(!progress.holdClaim(2))
        progress.record(2, bytes("c"))
        progress.record(1, bytes("b"))
        await closing.value
        #expect(closed.withLock { $0 } == [bytes("a"), bytes("b"), nil, nil])
        // A second close (the work finding itself cancelled) gives the same answer at once.
        #expect(await progress.close() == [bytes("a"), bytes("b"), nil, nil])
    }

    @Test("with no claim in flight, closing answers at once")
    func closeWithoutClaims() async {
        let progress = VerifyRoutes.BatchProgress(count: 2)
        progress.record(1, bytes("x"))
        #expect(await progress.close() == [nil, bytes("x")])
    }
}
