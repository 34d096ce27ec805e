import ServiceLifecycle
import TokenGuardCore

/// Keeps every fetching provider's keys fresh for the life of the service; stops on graceful shutdown.
public struct KeyRefreshService: Service {
    let sources: [JWKSKeySource]

    public init(sources: [JWKSKeySource]) { self.sources = sources }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for source in sources { group.addTask { await source.runRefreshLoop() } }
            }
        }
    }
}
