import ServiceLifecycle
import TokenGuardCore
import TokenGuardService

/// Keeps every fetching provider's keys and the revocations fresh for the life of the service; stops on graceful
/// shutdown.
package struct KeyRefreshService: Service {
    let sources: [JWKSKeySource]
    let revocations: RevocationGuard?
    let tenantResolvers: [TenantNameResolver]
    let startsAfter: StartGate?

    /// - Parameter startsAfter: opened when what the first fetches need is up (the demo's embedded IdP listening); a
    ///   fetch before that would fail and log a warning about an outage that is not one.
    package init(
        sources: [JWKSKeySource], revocations: RevocationGuard? = nil, tenantResolvers: [TenantNameResolver] = [], startsAfter: StartGate? = nil
    ) {
        self.sources = sources
        self.revocations = revocations
        self.tenantResolvers = tenantResolvers
        self.startsAfter = startsAfter
    }

    package func run() async throws {
        // With nothing to refresh (pinned keys only) the service still lives until shutdown: a service that
        // returns early stops the whole group.
        guard !sources.isEmpty || revocations != nil || !tenantResolvers.isEmpty else {
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            await startsAfter?.wait()
            await withTaskGroup(of: Void.self) { group in
                for source in sources { group.addTask { await source.runRefreshLoop() } }
                if let revocations { group.addTask { await revocations.runRefreshLoop() } }
                for resolver in tenantResolvers { group.addTask { await resolver.runRefreshLoop() } }
            }
        }
    }
}

/// A one-way gate: ``wait()`` returns once ``open()`` has been called (at once after that), or when the waiting task is
/// cancelled.
package final class StartGate: Sendable {
    private let stream: AsyncStream<Never>
    private let continuation: AsyncStream<Never>.Continuation

    package init() { (stream, continuation) = AsyncStream.makeStream(of: Never.self) }

    package func open() { continuation.finish() }

    /// For one waiter.
    package func wait() async { for await _ in stream {} }
}
