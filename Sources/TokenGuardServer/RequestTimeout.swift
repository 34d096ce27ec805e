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

    /// The request's deadline: `seconds` (the configured request timeout) from `started`, when the request arrived
    /// (the time its body took to arrive counts: red team, a slow body plus a rounded-down remainder answered a 3 s
    /// timeout at 4 s).
    struct Deadline: Sendable {
        let seconds: Int
        var started = ContinuousClock.now

        var remaining: Double {
            let elapsed = ContinuousClock.now - started
            return Double(seconds) - (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
    }

    static func run(_ deadline: Deadline, _ work: @escaping @Sendable () async throws -> Response) async throws -> Response {
        try await first(deadline, timedOut: { answer, byShutdown in _ = answer.deliver(.failure(timeoutError(deadline.seconds, byShutdown))) }, work)
    }

    /// `work`'s answer before the deadline, or nil (the work is cancelled): for a caller that records what it answered.
    static func within<Answer: Sendable>(_ deadline: Deadline, _ work: @escaping @Sendable () async -> Answer) async -> (Answer?, byShutdown: Bool) {
        do {
            let timedOut: @Sendable (FirstAnswer<(Answer?, byShutdown: Bool)>, Bool) -> Void = { answer, byShutdown in
                _ = answer.deliver(.success((nil, byShutdown)))
            }
            return try await first(deadline, timedOut: timedOut) { (await work(), false) }
        } catch {
            return (nil, false)  // never: neither the work nor the timeout's answer fails
        }
    }

    /// `work`'s answer before the deadline, or else `onTimeout`'s, made when the deadline passes (the work is
    /// cancelled): for an answer that can say what was done in time (a batch's finished items).
    static func answer<Answer: Sendable>(
        _ deadline: Deadline, onTimeout: @escaping @Sendable (_ byShutdown: Bool) async -> Answer, _ work: @escaping @Sendable () async -> Answer
    ) async -> Answer {
        do {
            return try await first(
                deadline, timedOut: { answer, byShutdown in Task { _ = answer.deliver(.success(await onTimeout(byShutdown))) } }, work)
        } catch {
            return await onTimeout(false)  // never: neither the work nor the timeout's answer fails
        }
    }

    static func timeoutError(_ seconds: Int, _ byShutdown: Bool) -> APIError {
        APIError(status: .serviceUnavailable, code: .requestTimeout, message: timeoutMessage(seconds, byShutdown), retryAfterSeconds: 1)
    }

    static func timeoutFailure(_ seconds: Int, _ byShutdown: Bool, subject: String = "request") -> VerificationResult {
        .failure(VerificationError(.requestTimeout, timeoutMessage(seconds, byShutdown, subject: subject), retryAfterSeconds: 1))
    }

    /// A deadline the shutdown brought forward (``DeadlineWheel/shorten(toWithin:)``) says so, so that a client (or
    /// its operator) does not go looking for a slow upstream.
    static func timeoutMessage(_ seconds: Int, _ byShutdown: Bool, subject: String = "request") -> String {
        byShutdown ? "\(subject) not finished before the server shut down; retry on another replica" : "\(subject) not answered within \(seconds) s"
    }

    /// A verification result before the deadline, or `request_timeout` (forward-auth answers even a timeout itself:
    /// in shadow mode it is a 200 like every other verdict).
    static func result(_ deadline: Deadline, _ work: @escaping @Sendable () async -> VerificationResult) async -> VerificationResult {
        let (result, byShutdown) = await within(deadline, work)
        return result ?? timeoutFailure(deadline.seconds, byShutdown)
    }

    /// Runs `work` in the current task, with `channel` closed if it is still running after `seconds`: for reading a
    /// request body, where the only wait is the client (a closed connection ends the read at once). No task is
    /// made for it, so a request whose answer needs no waiting costs no hop between threads.
    nonisolated(nonsending) static func closingConnection<Answer>(
        _ channel: any Channel, after seconds: Int, _ work: nonisolated(nonsending) () async throws -> Answer
    ) async throws -> Answer {
        let deadline = DeadlineWheel.shared.add(after: Double(seconds)) { _ in channel.close(promise: nil) }
        defer { DeadlineWheel.shared.remove(deadline) }
        return try await work()
    }

    /// The work runs in one task of its own (so that a timed-out answer need not wait for it); the deadline is kept
    /// by the shared ``DeadlineWheel`` rather than a sleeping timer task per request.
    /// `timedOut` delivers the timeout's answer (at once, or from a task of its own when it must wait for something).
    private static func first<Answer: Sendable>(
        _ requestDeadline: Deadline, timedOut: @escaping @Sendable (FirstAnswer<Answer>, _ byShutdown: Bool) -> Void,
        _ work: @escaping @Sendable () async throws -> Answer
    ) async throws -> Answer {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
            let answer = FirstAnswer(continuation)
            let task = Locked<Task<Void, Never>?>(nil)
            let deadline = DeadlineWheel.shared.add(after: requestDeadline.remaining) { byShutdown in
                // A claim kept in time: the work's verdict is owed, and it comes without waiting on anything.
                guard answer.passDeadline() else { return }
                // Cancelled before the timeout's answer is made: work that has not claimed a token's replay entry by
                // then claims none (the gate is closed, and the stores refuse a cancelled request's claim), so an
                // answer made now from what has finished leaves no claim behind that it does not report.
                task.withLock { $0 }?.cancel()
                timedOut(answer, byShutdown)
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
        /// True when the shutdown brought this deadline forward.
        var byShutdown = false
        let expire: @Sendable (_ byShutdown: Bool) -> Void
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
    func add(after seconds: Double, _ expire: @escaping @Sendable (_ byShutdown: Bool) -> Void) -> UInt64 {
        let requested = ContinuousClock.now.advanced(by: .milliseconds(Self.milliseconds(clamping: seconds)))
        let (id, start) = state.withLock { state -> (UInt64, Bool) in
            state.nextID &+= 1
            if let latest = state.latest, latest < requested {
                state.pending[state.nextID] = Entry(deadline: latest, byShutdown: true, expire: expire)
            } else {
                state.pending[state.nextID] = Entry(deadline: requested, expire: expire)
            }
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

    /// True once ``shorten(toWithin:)`` has been called.
    var isShuttingDown: Bool { state.withLock { $0.latest != nil } }

    func remove(_ id: UInt64) { _ = state.withLock { $0.pending.removeValue(forKey: id) } }

    /// Brings every deadline, present and future, to within `seconds` from now: at shutdown, a request waiting on an
    /// IdP that hangs (with outbound and request timeouts of minutes) is answered 503 and its outbound call cancelled,
    /// rather than holding the process past its orchestrator's patience.
    func shorten(toWithin seconds: Double) {
        let latest = ContinuousClock.now.advanced(by: .milliseconds(Self.milliseconds(clamping: seconds)))
        state.withLock { state in
            state.latest = state.latest.map { min($0, latest) } ?? latest
            for (id, entry) in state.pending where entry.deadline > latest {
                state.pending[id] = Entry(deadline: latest, byShutdown: true, expire: entry.expire)
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
            for entry in due { entry.expire(entry.byShutdown) }
            if idle { return }
        }
    }
}
