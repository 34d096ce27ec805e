import Hummingbird
import Logging
import Prometheus
import ServiceLifecycle
import TokenGuardCore
import TokenGuardService

/// Builds the tokenguard HTTP application: routes, limits, background key refresh.
///
/// - Parameters:
///   - registry: the configured providers' verifiers.
///   - kinds: each provider's kind, for `/v1/providers`.
///   - host, port: where to listen (default 127.0.0.1:8080).
///   - prometheus: the registry `/metrics` renders (the one bootstrapped into swift-metrics).
///   - extraServices: more services to run in the same group (an embedded dev IdP).
///   - drain: the stop-signal watcher whose state `/readyz` reports (`serve` runs it beside the application).
///   - keyRefreshStartsAfter: holds back the first key fetches until it opens (the demo's embedded IdP listening).
package func buildApplication(
    registry: VerifierRegistry, kinds: [String: ProviderKind], host: String, port: Int, settings: ServerLimits = ServerLimits(),
    prometheus: PrometheusCollectorRegistry?, logger: Logger, extraServices: [any Service] = [], drain: ShutdownDrain? = nil,
    keyRefreshStartsAfter: StartGate? = nil, onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) -> some ApplicationProtocol {
    // HEAD wherever GET is served: the GET answer's status and headers without its body.
    let router = Router(context: TokenGuardRequestContext.self, options: .autoGenerateHeadEndpoints)
    // Only where its lines would be written: each middleware is a layer of async calls on every request.
    if logger.logLevel <= .debug { router.middlewares.add(RequestLogMiddleware()) }
    if let callerKeys = settings.callerKeys { router.middlewares.add(CallerKeyMiddleware(keys: callerKeys)) }
    // Made after the metrics factory is bootstrapped: its counters are the factory's.
    let metrics = ServiceMetrics(registry: registry)
    let verifyRoutes = VerifyRoutes(registry: registry, settings: settings, metrics: metrics)
    verifyRoutes.register(on: router)
    let forwardAuth = ForwardAuthCheck(registry: registry, settings: settings, metrics: metrics)
    StatusRoutes(registry: registry, kinds: kinds, prometheus: prometheus, metrics: metrics, settings: settings, drain: drain).register(on: router)
    RevocationRoutes(registry: registry, settings: settings, kinds: kinds, logger: logger).register(on: router)
    // Added after the routes: a route's chain holds the middlewares added before it, while the chain of a request no
    // route takes is made from all of them when the router is built. So forward-auth paths (never a route) and a known
    // path asked with a method it is not served with reach these two, in this order, and a routed request skips two
    // layers of async calls it would only pass through. DemoE2ETests and ForwardAuthE2ETests hold both behaviours.
    router.middlewares.add(ForwardAuthMiddleware(check: forwardAuth))
    router.middlewares.add(
        MethodNotAllowedMiddleware(
            allowed: [
                ("/v1/verify", [.post]), ("/v1/verify/batch", [.post]), ("/v1/providers", [.get, .head]), ("/healthz", [.get, .head]),
                ("/readyz", [.get, .head]), ("/metrics", [.get, .head]), ("/v1/revocations", [.get, .head, .post, .delete]),
            ], allowedOneSegmentBelow: [("/v1/notifications/", [.post])]))
    let serverName = "tokenguard"
    // Not at debug level: requests answered in the pipeline would miss the request log.
    let answering =
        logger.logLevel <= .debug
        ? nil
        : VerifyOnTheEventLoop.Answering(routes: verifyRoutes, forwardAuth: forwardAuth, callerKeys: settings.callerKeys, serverName: serverName)
    var application = Application(
        router: router,
        server: ServerEventLoops.httpServer(
            configuration: .init(
                additionalChannelHandlers: [ClosingAfterResponse()], idleTimeout: .seconds(Int64(settings.idleTimeoutSeconds))),
            answering: answering),
        configuration: .init(address: .hostname(host, port: port), serverName: serverName, reuseAddress: true),
        onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
        eventLoopGroupProvider: .shared(ServerEventLoops.group), logger: logger)
    application.addServices(
        KeyRefreshService(
            sources: registry.fetchingSources, revocations: registry.revocations, tenantResolvers: Array(registry.tenantResolvers.values),
            startsAfter: keyRefreshStartsAfter))
    application.addServices(extraServices)
    return application
}
