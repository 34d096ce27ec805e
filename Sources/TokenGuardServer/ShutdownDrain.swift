import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Stopping without failing a request behind a load balancer: on SIGTERM (or SIGINT) `/readyz` turns 503 at once
/// while every request is still served; after the grace period this service returns, and the group's graceful
/// shutdown stops accepting and lets in-flight requests finish, within ``inFlightSeconds``. A second signal ends the
/// grace period early.
package final class ShutdownDrain: Service, Sendable {
    private let draining = Atomic<Bool>(false)
    let graceSeconds: Int
    let logger: Logger

    package init(graceSeconds: Int, logger: Logger) {
        self.graceSeconds = graceSeconds
        self.logger = logger
    }

    /// How long requests in flight when the server stops have to finish, at most.
    package static let inFlightSeconds: Double = 10

    /// True from the first stop signal on: `/readyz` says not ready.
    package var isDraining: Bool { draining.load(ordering: .relaxed) }

    private enum Event: Sendable {
        case signal(UnixSignal)
        case graceOver
    }

    package func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let (events, sink) = AsyncStream.makeStream(of: Event.self)
        await withTaskGroup(of: Void.self) { group in
            // One iteration of the signals for the process's life: the trap stays installed until the end.
            group.addTask {
                for await signal in signals { sink.yield(.signal(signal)) }
                sink.finish()
            }
            var iterator = events.makeAsyncIterator()
            guard case .signal(let first)? = await iterator.next() else {
                group.cancelAll()
                return
            }
            draining.store(true, ordering: .relaxed)
            if graceSeconds > 0 {
                logger.notice("\(first): not ready now; serving for \(graceSeconds) s more, then finishing in-flight requests")
                group.addTask {
                    try? await Task.sleep(for: .seconds(self.graceSeconds))
                    sink.yield(.graceOver)
                }
                _ = await iterator.next()  // the grace period's end, or a second signal
            }
            // In-flight requests get this long to finish; then each is answered 503 (request_timeout) and its
            // outbound calls are cancelled.
            DeadlineWheel.shared.shorten(toWithin: Self.inFlightSeconds)
            group.cancelAll()
        }
    }
}
