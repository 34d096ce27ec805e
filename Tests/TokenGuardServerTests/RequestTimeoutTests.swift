import Testing
import TokenGuardService
import TokenGuardSync

@testable import TokenGuardServer

/// The request deadline and the replay claim: a claim kept in time is answered with its verdict, never with the
/// deadline's 503 (the client's retry would meet `token_replayed` for a token it was never told was accepted).
struct RequestTimeoutTests {
    /// Waits (at most 20 s) until `done` holds: each step below waits for the deadline itself rather than a time, so
    /// a loaded machine whose deadline tick comes late changes nothing.
    func waitUntil(_ done: () -> Bool) async {
        for _ in 0..<1000 where !done() { try? await Task.sleep(for: .milliseconds(20)) }
    }

    @Test("a claim kept before the deadline gets the work's answer, however late; after the deadline no claim is kept")
    func claimKeptInTimeIsAnswered() async {
        let timedOut: @Sendable (Bool) async -> String = { _ in "request_timeout" }
        // Kept before the deadline, the verdict made after it passed (a hop back from Redis's reply on a busy loop).
        let kept = await RequestTimeout.answer(
            RequestTimeout.Deadline(seconds: 1), onTimeout: timedOut,
            {
                guard ReplayClaimGates.mayKeepClaim() else { return "claim refused" }
                await waitUntil { ReplayClaimGates.current?.isOpen == false }
                return "valid"
            })
        #expect(kept == "valid")

        // The deadline first: the timeout answers, the work is cancelled, and its gate is closed: no claim is kept.
        let after = Locked<(open: Bool?, kept: Bool?)>((nil, nil))
        let late = await RequestTimeout.answer(
            RequestTimeout.Deadline(seconds: 1), onTimeout: timedOut,
            {
                await waitUntil { Task.isCancelled }
                let open = ReplayClaimGates.current?.isOpen
                let kept = ReplayClaimGates.mayKeepClaim()
                after.withLock { $0 = (open, kept) }
                return kept ? "valid" : "request_timeout"  // a cancelled work answers as the deadline does (a batch)
            })
        #expect(late == "request_timeout")
        await waitUntil { after.withLock { $0.kept } != nil }
        #expect(after.withLock { $0.open } == false)
        #expect(after.withLock { $0.kept } == false)
    }
}

struct ClosingAfterResponseTests {
    @Test("a Connection value says close when one of its comma-separated options is close, in any case")
    func connectionOptions() {
        for value in ["close", "Close", "CLOSE", " keep-alive, close ", "upgrade,close", "close\t"] {
            #expect(ClosingAfterResponse.saysClose(value), "\(value)")
        }
        for value in ["", "keep-alive", "closed", "clos", "xclose", "close-ish", ",", "c lose"] {
            #expect(!ClosingAfterResponse.saysClose(value), "\(value)")
        }
    }
}
