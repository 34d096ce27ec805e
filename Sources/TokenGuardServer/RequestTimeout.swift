import Hummingbird
import NIOCore
import Synchronization
import TokenGuardCore
import TokenGuardService
import TokenGuardSync

/// Bounds a request's work: after `seconds` the client gets 503 with `Retry-After` and the work is cancelled.
/// Outbound calls are bounded by their own timeouts; this bounds everything else (a slow body upload, a pile-up
/// behind a refetch). The answer does not wait for the cancelled work to wind down: a shared key fetch it was
/// waiting on goes on for the requests still waiting on it.
enum RequestTimeout {
    /// Resumes a continuation exactly once, from whichever of the work and the timer finishes first; and the replay
    /// claim gate of the request's verification.
    ///
    /// A claim the work keeps before the deadline owes the client the work's verdict: the deadline then waits for it
    /// (microseconds: nothing is awaited after a claim is kept) instead of answering 503 over it, which would leave a
    /// claim behind that the client was never told of (its retry would meet `token_replayed`). A claim made after the
    /// deadline is not kept.
    final class FirstAnswer<Answer: Sendable>: ReplayClaimGate {
        private struct State {
            var continuation: CheckedContinuation<Answer, any Error>?
            var deadlinePassed = false
            var claimHeld = false
        }
        private let state: Locked<State>

        init(_ continuation: CheckedContinuation<Answer, any Error>) { state = Locked(State(continuation: continuation)) }

        /// True when this call delivered the answer.
        func deliver(_ result: Result<Answer, any Error>) -> Bool {
            guard
                let continuation = state.withLock({ state in
                    defer { state.continuation = nil }
                    return state.continuation
                })
            else { return false }
            continuation.resume(with: result)
            return true
        }

        var isOpen: Bool { state.withLock { $0.continuation != nil && !$0.deadlinePassed } }

        func holdClaim() -> Bool {
            state.withLock { state in
                guard state.continuation != nil, !state.deadlinePassed else { return false }
                state.claimHeld = true
                return true
            }
        }

        /// At the deadline: no claim is kept after this; true when the timeout may answer, false when a claim kept in
        /// time leaves the answer to the work.
        func passDeadline() -> Bool {
            state.withLock { state in
                state.deadlinePassed = true
                return !state.claimHeld
            }
        }
    }

    static func run(seconds: Int, _ work: @escaping @Sendable () async throws -> Response) async throws -> Response {
        try await first(seconds: seconds, timedOut: { _ = $0.deliver(.failure(timeoutError(seconds))) }, work)
    }

    /// `work`'s answer within `seconds`, or else `onTimeout`'s, made when the deadline passes (the work is cancelled):
    /// for an answer that can say what was done in time (a batch's finished items).
    static func answer<Answer: Sendable>(
        seconds: Int, onTimeout: @escaping @Sendable () async -> Answer, _ work: @escaping @Sendable () async -> Answer
    ) async -> Answer {
        do {
            return try await first(seconds: seconds, timedOut: { answer in Task { _ = answer.deliver(.success(await onTimeout())) } }, work)
        } catch {
            return await onTimeout()  // never: neither the work nor the timeout's answer fails
        }
    }

    static func timeoutError(_ seconds: Int) -> APIError {
        APIError(status: .serviceUnavailable, code: .requestTimeout, message: timeoutMessage(seconds), retryAfterSeconds: 1)
    }

    /// At shutdown the deadline may have come before `seconds` (``DeadlineWheel/shorten(toWithin:)``): the message
    /// says which, so that a client (or its operator) does not go looking for a slow upstream.
    static func timeoutMessage(_ seconds: Int, subject: String = "request") -> String {
        DeadlineWheel.shared.isShortened
            ? "\(subject) not finished before the server shut down; retry on another replica" : "\(subject) not answered within \(seconds) s"
    }

    /// A verification result within `seconds`, or `request_timeout` (forward-auth answers even a timeout itself:
    /// in shadow mode it is a 200 like every other verdict).
    static func result(seconds: Int, _ work: @escaping @Sendable () async -> VerificationResult) async -> VerificationResult {
        do {
            return try await first(seconds: seconds, timedOut: { _ = $0.deliver(.failure(timeoutError(seconds))) }, work)
        } catch {
            return .failure(VerificationError(.requestTimeout, timeoutMessage(seconds), retryAfterSeconds: 1))
        }
    }

    /// Runs `work` in the current task, with `channel` closed if it is still running after `seconds`: for reading a
    /// request body, where the only wait is the client (a closed connection ends the read at once). No task is
    /// made for it, so a request whose answer needs no waiting costs no hop between threads.
    nonisolated(nonsending) static func closingConnection<Answer>(
        _ channel: any Channel, after seconds: Int, _ work: nonisolated(nonsending) () async throws -> Answer
    ) async throws -> Answer {
        let deadline = DeadlineWheel.shared.add(after: Double(seconds)) { channel.close(promise: nil) }
        defer { DeadlineWheel.shared.remove(deadline) }
        return try await work()
    }

    /// The work runs in one task of its own (so that a timed-out answer need not wait for it); the deadline is kept
    /// by the shared ``DeadlineWheel`` rather than a sleeping timer task per request.
    /// `timedOut` delivers the timeout's answer (at once, or from a task of its own when it must wait for something).
    private static func first<Answer: Sendable>(
        seconds: Int, timedOut: @escaping @Sendable (FirstAnswer<Answer>) -> Void, _ work: @escaping @Sendable () async throws -> Answer
    ) async throws -> Answer {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
            let answer = FirstAnswer(continuation)
            let task = Locked<Task<Void, Never>?>(nil)
            let deadline = DeadlineWheel.shared.add(after: Double(seconds)) {
                // A claim kept in time: the work's verdict is owed, and it comes without waiting on anything.
                guard answer.passDeadline() else { return }
                // Cancelled before the timeout's answer is made: work that has not claimed a token's replay entry by
                // then claims none (the gate is closed, and the stores refuse a cancelled request's claim), so an
                // answer made now from what has finished leaves no claim behind that it does not report.
                task.withLock { $0 }?.cancel()
                timedOut(answer)
            }
            task.withLock {
                $0 = Task {
                    // The request's own gate; a batch gives each item one of its own within this.
                    await ReplayClaimGates.$current.withValue(answer) {
                        do {
                            _ = answer.deliver(.success(try await work()))
                        } catch {
                            _ = answer.deliver(.failure(error))
                        }
                    }
                    DeadlineWheel.shared.remove(deadline)
                }
            }
        }
    }
}

/// Request deadlines, checked ten times a second by one task that runs while any request is in flight: an expired
/// deadline whose request is still unanswered delivers the timeout. A request answered in time removes its entry.
final class DeadlineWheel: Sendable {
    static let shared = DeadlineWheel()

    private struct Entry {
        let deadline: ContinuousClock.Instant
        let expire: @Sendable () -> Void
    }

    private struct State {
        var pending: [UInt64: Entry] = [:]
        var nextID: UInt64 = 0
        var ticking = false
        /// Set at shutdown: no deadline, present or future, falls later than this.
        var latest: ContinuousClock.Instant?
    }

    private let state = Locked(State())

    /// Registers a deadline; returns its id for ``remove(_:)``.
    func add(after seconds: Double, _ expire: @escaping @Sendable () -> Void) -> UInt64 {
        let requested = ContinuousClock.now.advanced(by: .milliseconds(Self.milliseconds(clamping: seconds)))
        let (id, start) = state.withLock { state -> (UInt64, Bool) in
            state.nextID &+= 1
            let deadline = state.latest.map { min($0, requested) } ?? requested
            state.pending[state.nextID] = Entry(deadline: deadline, expire: expire)
            defer { state.ticking = true }
            return (state.nextID, !state.ticking)
        }
        if start { Task.detached { await self.tick() } }
        return id
    }

    /// Clamped before the conversion: a NaN, an infinity or a huge value must not trap (config allows 1–600 s).
    private static func milliseconds(clamping seconds: Double) -> Int64 {
        seconds.isFinite ? Int64(min(max(seconds, 0), 86_400) * 1000) : 0
    }

    /// True once ``shorten(toWithin:)`` has been called (the server is shutting down).
    var isShortened: Bool { state.withLock { $0.latest != nil } }

    func remove(_ id: UInt64) { _ = state.withLock { $0.pending.removeValue(forKey: id) } }

    /// Brings every deadline, present and future, to within `seconds` from now: at shutdown, a request waiting on an
    /// IdP that hangs (with outbound and request timeouts of minutes) is answered 503 and its outbound call cancelled,
    /// rather than holding the process past its orchestrator's patience.
    func shorten(toWithin seconds: Double) {
        let latest = ContinuousClock.now.advanced(by: .milliseconds(Self.milliseconds(clamping: seconds)))
        state.withLock { state in
            state.latest = state.latest.map { min($0, latest) } ?? latest
            for (id, entry) in state.pending where entry.deadline > latest {
                state.pending[id] = Entry(deadline: latest, expire: entry.expire)
            }
        }
    }

    private func tick() async {
        while true {
            try? await Task.sleep(for: .milliseconds(100))
            let now = ContinuousClock.now
            let (due, idle) = state.withLock { state -> ([Entry], Bool) in
                let expired = state.pending.filter { $0.value.deadline <= now }
                for id in expired.keys { state.pending.removeValue(forKey: id) }
                if state.pending.isEmpty { state.ticking = false }
                return (Array(expired.values), state.pending.isEmpty)
            }
            for entry in due { entry.expire() }
            if idle { return }
        }
    }
}
