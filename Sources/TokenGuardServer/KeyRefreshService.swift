import ServiceLifecycle
import TokenGuardCore
import TokenGuardService

/// Keeps every fetching provider's keys and the revocations fresh for the life of the service; stops on graceful
/// shutdown.
package struct KeyRefreshService: Service {
    let sources: [JWKSKeySource]
    let revocations: RevocationGuard?
    let tenantResolvers: [TenantNameResolver]

    package init(sources: [JWKSKeySource], revocations: RevocationGuard? = nil, tenantResolvers: [TenantNameResolver] = []) {
        self.sources = sources
        self.revocations = revocations
        self.tenantResolvers = tenantResolvers
    }

    package func run() async throws {
        // With nothing to refresh (pinned keys only) the service still lives until shutdown: a service that
        // returns early stops the whole group.
        guard !sources.isEmpty || revocations != nil || !tenantResolvers.isEmpty else {
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for source in sources { group.addTask { await source.runRefreshLoop() } }
                if let revocations { group.addTask { await revocations.runRefreshLoop() } }
                for resolver in tenantResolvers { group.addTask { await resolver.runRefreshLoop() } }
            }
        }
    }
}
