import Hummingbird
import Synchronization
import TokenGuardCore
import TokenGuardService
import TokenGuardSync

/// Bounds a request's work: after `seconds` the client gets 503 with `Retry-After` and the work is cancelled.
/// Outbound calls are bounded by their own timeouts; this bounds everything else (a slow body upload, a pile-up
/// behind a refetch). The answer does not wait for the cancelled work to wind down: a shared key fetch it was
/// waiting on goes on for the requests still waiting on it.
enum RequestTimeout {
    /// Resumes a continuation exactly once, from whichever of the work and the timer finishes first.
    final class FirstAnswer<Answer: Sendable>: Sendable {
        private let continuation: Locked<CheckedContinuation<Answer, any Error>?>

        init(_ continuation: CheckedContinuation<Answer, any Error>) { self.continuation = Locked(continuation) }

        /// True when this call delivered the answer.
        func deliver(_ result: Result<Answer, any Error>) -> Bool {
            guard
                let continuation = continuation.withLock({ value in
                    defer { value = nil }
                    return value
                })
            else { return false }
            continuation.resume(with: result)
            return true
        }
    }

    static func run(seconds: Int, _ work: @escaping @Sendable () async throws -> Response) async throws -> Response {
        try await first(seconds: seconds, work)
    }

    /// A verification result within `seconds`, or `request_timeout` (forward-auth answers even a timeout itself:
    /// in shadow mode it is a 200 like every other verdict).
    static func result(seconds: Int, _ work: @escaping @Sendable () async -> VerificationResult) async -> VerificationResult {
        do {
            return try await first(seconds: seconds, work)
        } catch {
            return .failure(VerificationError(.requestTimeout, "request not answered within \(seconds) s", retryAfterSeconds: 1))
        }
    }

    private static func first<Answer: Sendable>(seconds: Int, _ work: @escaping @Sendable () async throws -> Answer) async throws -> Answer {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
            let answer = FirstAnswer(continuation)
            let timer = Task {
                try await Task.sleep(for: .seconds(seconds))
                return APIError(
                    status: .serviceUnavailable, code: .requestTimeout, message: "request not answered within \(seconds) s", retryAfterSeconds: 1)
            }
            let task = Task {
                do {
                    _ = answer.deliver(.success(try await work()))
                } catch {
                    _ = answer.deliver(.failure(error))
                }
                // Answered: the timer has nothing left to do (a sleeping timer per request would pile up).
                timer.cancel()
            }
            Task {
                guard let error = try? await timer.value else { return }
                if answer.deliver(.failure(error)) { task.cancel() }
            }
        }
    }
}
