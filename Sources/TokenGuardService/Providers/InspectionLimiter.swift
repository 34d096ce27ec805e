import TokenGuardSync

/// Bounds the calls an opaque provider's inspection API receives from this process: at most `maximumConcurrent`
/// at once and `maximumPerSecond` on average (a token bucket holding one second's worth). Behind forward-auth every
/// request with a new token costs a call to the provider; a flood of made-up tokens must not become a flood of
/// calls (and a rate-limited app at the provider). Over either bound the answer is `keys_unavailable`: the check
/// cannot be made now, which is never a rejection.
package final class InspectionLimiter: Sendable {
    package struct Limits: Sendable, Equatable {
        package var maximumConcurrent = 16
        package var maximumPerSecond: Double = 50
        package init() {}
    }

    private struct State {
        var inFlight = 0
        var tokens: Double
        var refilledAt: Double
    }

    package let limits: Limits
    private let state: Locked<State>

    package init(limits: Limits, now: Double) {
        self.limits = limits
        state = Locked(State(tokens: limits.maximumPerSecond, refilledAt: now))
    }

    /// Takes a slot for one call, or nil with the reason it cannot be made now. Every slot taken is given back with
    /// ``release()``.
    package func acquire(now: Double) -> String? {
        state.withLock { state in
            let elapsed = now - state.refilledAt
            if elapsed.isFinite, elapsed > 0 {
                state.tokens = min(limits.maximumPerSecond, state.tokens + elapsed * limits.maximumPerSecond)
                state.refilledAt = now
            }
            guard state.inFlight < limits.maximumConcurrent else { return "\(limits.maximumConcurrent) inspection calls already in flight" }
            guard state.tokens >= 1 else { return "over \(Int(limits.maximumPerSecond)) inspection calls per second" }
            state.tokens -= 1
            state.inFlight += 1
            return nil
        }
    }

    package func release() { state.withLock { $0.inFlight -= 1 } }
}
