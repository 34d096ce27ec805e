import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix

/// Runs each connection's task on its channel's event loop, so that reading a request, answering it and writing the
/// answer happen on the one thread that does the connection's I/O: no hand-off between threads per request.
///
/// Used when the server has one event loop (one CPU to run on; see ``ServerEventLoops/httpServer(configuration:)``).
/// Why: with handlers on Swift's cooperative pool, every request crossed threads twice, and on a busy core each
/// crossing is a wake-up that preempts whatever runs there. An event-loop thread woken by the next request would
/// interrupt a signature check half way: one server core, full RS256 verification, about one involuntary context
/// switch per request. A handler's work is bounded (a verification is tens of microseconds; waits are `await`s, and
/// blocking C calls run on ``ThreadConfinedWorkers``); what may run long, a batch's items, leaves the loop
/// (`VerifyRoutes.verifyItems`).
///
/// Connections take turns by the read: a connection's requests already read are served back to back (NIO runs every
/// ready job before it polls its sockets again), so a read is at most ``turnBytes``, once per poll. With NIO's
/// defaults (four reads of up to 64 KiB), a connection with 200 verifications pipelined was served all of them before
/// a `/healthz` on another connection was read.
struct EventLoopConnections<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner
    /// Verifications and forward-auth checks answered in the pipeline (``VerifyOnTheEventLoop``); nil for none.
    let answering: VerifyOnTheEventLoop.Answering?
    static var turnBytes: Int { 16 * 1024 }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
            .flatMap {
                channel.setOption(
                    ChannelOptions.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: Self.turnBytes))
            }
            .flatMap { inner.setup(channel: channel, logger: logger) }
            .flatMapThrowing { value in
                try HTTP1VersionRules.install(in: channel.pipeline.syncOperations)
                guard let answering else { return value }
                // After Hummingbird's connection state handler, which must see every request and response for its idle
                // timeout and graceful shutdown, and after ``ClosingAfterResponse``, which keeps the order of answers.
                let pipeline = channel.pipeline.syncOperations
                let connectionState = try pipeline.handler(type: HTTPConnectionStateHandler.self)
                try pipeline.addHandler(VerifyOnTheEventLoop(answering), position: .after(connectionState))
                return value
            }
    }

    func handle(value: Value, logger: Logger) async {
        await withTaskExecutorPreference(EventLoopTaskExecutor(value.channel.eventLoop)) {
            await inner.handle(value: value, logger: logger)
        }
    }
}

/// A task executor that runs jobs on one NIO event loop.
final class EventLoopTaskExecutor: TaskExecutor {
    private let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// The servers' event loops: one thread per core this process may run on.
///
/// NIO's own count follows cgroup quotas and cpusets but not the affinity mask (`taskset`, a pinned sidecar): two
/// loops time-sliced on one core make a request that lands on the descheduled loop wait for the scheduler's tick,
/// milliseconds, while its connection's loop is otherwise idle.
package enum ServerEventLoops {
    package static let group = MultiThreadedEventLoopGroup(numberOfThreads: threadCount)
    static let threadCount = usableCPUCount()

    /// HTTP/1.1, with requests on the connection's event loop when there is one loop (``EventLoopConnections``),
    /// else on Swift's cooperative pool. With several loops a connection stays on the loop it was given, so clients
    /// whose keep-alive connections share a loop would share one core while another idles; the pool spreads their
    /// work over every core (two CPUs, eight connections driven four at a time: 33,000 verifications a second on the
    /// pool, 20,000 on the loops).
    ///
    /// With one loop, `answering` (when given) answers verifications and forward-auth checks that need no waiting
    /// in the pipeline (``VerifyOnTheEventLoop``). With several it is not used: a verification answered on the loop
    /// that read it would stay on that loop's core, where the pool spreads them; request bodies reach the pool as
    /// copies (``BodiesOffThePool``).
    static func httpServer(configuration: HTTP1Channel.Configuration, answering: VerifyOnTheEventLoop.Answering?) -> HTTPServerBuilder {
        guard threadCount == 1 else {
            return HTTPServerBuilder { responder in
                BodiesOffThePool(inner: HTTP1Channel(responder: responder, configuration: configuration))
            }
        }
        return HTTPServerBuilder { responder in
            EventLoopConnections(inner: HTTP1Channel(responder: responder, configuration: configuration), answering: answering)
        }
    }

    static func usableCPUCount() -> Int {
        let nio = max(1, System.coreCount)
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let allowed = allowedCPUCount(status: status), allowed > 0
        else { return nio }
        return min(nio, allowed)
    }

    /// How many CPUs `Cpus_allowed:` of a `/proc/<pid>/status` text admits (a hex mask in comma-separated groups).
    static func allowedCPUCount(status: String) -> Int? {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed:") }) else { return nil }
        var count = 0
        for character in line.dropFirst("Cpus_allowed:".count) where character != "," && !character.isWhitespace {
            guard let digit = character.hexDigitValue else { return nil }
            count += digit.nonzeroBitCount
        }
        return count
    }
}
