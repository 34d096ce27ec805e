import Hummingbird
import Prometheus
import TokenGuardCore
import TokenGuardService

/// `GET /v1/providers`, `/healthz`, `/readyz` and `/metrics`.
struct StatusRoutes: Sendable {
    let registry: VerifierRegistry
    let kinds: [String: ProviderKind]
    let prometheus: PrometheusCollectorRegistry?
    let metrics: ServiceMetrics
    let settings: ServerLimits
    /// Set once a stop signal came: `/readyz` is 503 from then on.
    let drain: ShutdownDrain?

    func register(on router: Router<TokenGuardRequestContext>) {
        router.get("/healthz") { _, _ in JSONResponse.make(.object(JSONObject([("status", .string("ok"))]))) }
        router.get("/readyz") { _, _ in await readiness() }
        router.get("/v1/providers") { _, _ in JSONResponse.make(.object(JSONObject([("providers", .array(providers()))]))) }
        router.get("/metrics") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            let text = prometheus.map { $0.emitToBuffer() + metrics.durationExposition() } ?? []
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
    }

    private func providers() -> [JSONValue] {
        var list: [JSONValue] = []
        for name in registry.providerNames {
            var entry = JSONObject([("name", .string(name)), ("kind", .string(kinds[name]?.rawValue ?? "unknown"))])
            if let verifier = registry.verifiers[name] {
                let status = verifier.keySource.status
                entry.set("usable", .bool(status.usable))
                entry.set("key_ids", .array(status.keyIDs.map(JSONValue.string)))
                entry.set("fetched_at", status.fetchedAt.flatMap { Int64(exactly: $0.rounded(.down)) }.map(JSONValue.integer) ?? .null)
                entry.set("expires_at", status.expiresAt.flatMap { Int64(exactly: $0.rounded(.down)) }.map(JSONValue.integer) ?? .null)
                entry.set("last_error", status.lastError.map(JSONValue.string) ?? .null)
                entry.set("skipped_keys", status.skippedKeys.json)
                let changes = (verifier.keySource as? JWKSKeySource)?.drift.changes ?? []
                entry.set(
                    "drift",
                    .array(
                        changes.map { change in
                            .object(
                                JSONObject([
                                    ("what", .string(change.what)), ("from", .string(change.from)), ("to", .string(change.to)),
                                    ("seen_at", .integer(change.seenAt)),
                                ]))
                        }))
                if let resolver = registry.tenantResolvers[name] {
                    entry.set(
                        "tenant_names",
                        .array(
                            resolver.resolutions.map { item in
                                var object = JSONObject([("name", .string(item.name))])
                                switch item.resolution {
                                case .resolved(let tenantID): object.set("tenant_id", .string(tenantID))
                                case .notFound: object.set("error", .string("the authority knows no such tenant"))
                                case .unreachable(let reason): object.set("error", .string(reason))
                                case .pending: object.set("error", .string("not resolved yet"))
                                }
                                return .object(object)
                            }))
                }
            } else {
                // Opaque-token providers hold no keys; they are asked per token.
                entry.set("usable", .bool(true))
                entry.set("key_ids", .array([]))
                entry.set("fetched_at", .null)
                entry.set("expires_at", .null)
                entry.set("last_error", .null)
                entry.set("skipped_keys", .array([]))
                entry.set("drift", .array([]))
            }
            list.append(.object(entry))
        }
        return list
    }

    /// Ready only when every JWS provider has usable keys and the replay store (when on) answers.
    private func readiness() async -> Response {
        var providers = JSONObject()
        var ready = true
        for (name, verifier) in registry.verifiers.sorted(by: { $0.key < $1.key }) {
            let status = verifier.keySource.status
            ready = ready && status.usable
            var entry = JSONObject([("usable", .bool(status.usable))])
            if !status.usable {
                // Stale keys say so first: the last error may be an hour old, and the IdP back since.
                let reason =
                    status.fetchedAt == nil
                    ? status.lastError ?? "no keys yet"
                    : "the last good keys are older than max_stale_seconds" + (status.lastError.map { "; last error: \($0)" } ?? "")
                entry.set("reason", .string(reason))
            }
            providers.set(name, .object(entry))
        }
        var body = JSONObject([("ready", .bool(ready)), ("providers", .object(providers))])
        if let drain, drain.isDraining {
            ready = false
            body.set("ready", .bool(false))
            body.set("draining", .bool(true))
        }
        if let revocations = registry.revocations {
            let fresh = revocations.isFresh
            ready = ready && fresh
            body.set("ready", .bool(ready))
            body.set("revocations", .object(JSONObject([("ok", .bool(fresh)), ("records", .integer(Int64(revocations.count)))])))
        }
        if let store = registry.replayStore {
            let (ok, detail) = await store.health()
            ready = ready && ok
            body.set("ready", .bool(ready))
            body.set("replay_store", .object(JSONObject([("ok", .bool(ok)), ("detail", .string(detail))])))
        }
        return JSONResponse.make(.object(body), status: ready ? .ok : .serviceUnavailable, retryAfter: ready ? nil : settings.retryAfterSeconds)
    }
}
