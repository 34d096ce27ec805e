import Foundation
import TokenGuardCore

/// The configured providers, each with its verifier, looked up by the name requests use.
package struct VerifierRegistry: Sendable {
    /// JWS ID-token providers.
    package let verifiers: [String: TokenVerifier]
    /// Opaque access-token providers (GitHub, classic Facebook Login).
    package let opaqueVerifiers: [String: OpaqueTokenVerifier]
    /// The fetching key sources, for background refresh and readiness.
    package let fetchingSources: [JWKSKeySource]
    /// Replay protection per JWS provider, where enabled.
    package let replayGuards: [String: ReplayGuard]
    /// The replay store, when replay protection is on (for readiness).
    package let replayStore: (any ReplayStore)?
    /// Microsoft tenants named by domain, resolved in the background.
    package private(set) var tenantResolvers: [String: TenantNameResolver] = [:]
    /// Revocations applied to every verdict, when configured (the composition root opens the store).
    package private(set) var revocations: RevocationGuard? = nil
    /// How each provider answers gateway checks (`forward_auth`); a provider without the block uses the defaults.
    package private(set) var forwardAuthPolicies: [String: ForwardAuthPolicy] = [:]
    /// Each provider's kind (`facebook` routes by the token's shape; single-kind Facebook providers name the other).
    package private(set) var kinds: [String: ProviderKind] = [:]
    /// The largest token accepted (`max_token_bytes`), for reading credentials out of headers.
    package private(set) var maxTokenBytes = ProviderPolicy.defaultMaxTokenBytes
    private let clock: WallClock
    /// The configured provider names by their bytes: a request's name must match one byte for byte, and from then
    /// on only the configured name is used (verdicts, metrics, cache and replay keys).
    private let namesByBytes: [ByteKey: String]
    /// What a request naming a provider needs on the path with the keys in hand, found by its name's bytes in one
    /// look: a few providers are compared byte for byte in a list (no hashing, no copy of the name), more through
    /// ``namesByBytes``. Rebuilt when the kinds are set.
    private var routes: [Route] = []

    /// A configured provider's name and what the hot path asks of it.
    private struct Route {
        let name: String
        /// The JWS verifier when the provider is verified on the direct path (not a Facebook kind, which routes by
        /// the token's shape); nil otherwise.
        let directVerifier: TokenVerifier?
        let replayGuard: ReplayGuard?
    }

    /// Routes compared in a list up to this many providers; beyond, by hash.
    private static let routesCompared = 8

    package init(
        verifiers: [String: TokenVerifier], opaqueVerifiers: [String: OpaqueTokenVerifier] = [:], replayGuards: [String: ReplayGuard] = [:],
        replayStore: (any ReplayStore)? = nil, clock: WallClock = .system
    ) {
        self.verifiers = verifiers
        self.opaqueVerifiers = opaqueVerifiers
        self.fetchingSources = verifiers.values.compactMap { $0.keySource as? JWKSKeySource }
        self.replayGuards = replayGuards
        self.replayStore = replayStore
        self.clock = clock
        var names: [ByteKey: String] = [:]
        for name in Array(verifiers.keys) + Array(opaqueVerifiers.keys) { names[ByteKey(name)] = name }
        self.namesByBytes = names
        self.routes = Self.routes(names: names.values, verifiers: verifiers, replayGuards: replayGuards, kinds: [:])
    }

    private static func routes(
        names: some Sequence<String>, verifiers: [String: TokenVerifier], replayGuards: [String: ReplayGuard], kinds: [String: ProviderKind]
    ) -> [Route] {
        names.sorted().map { name in
            let routesByShape = kinds[name] == .facebook || kinds[name] == .facebookLimited
            return Route(name: name, directVerifier: routesByShape ? nil : verifiers[name], replayGuard: replayGuards[name])
        }
    }

    /// The route of the configured provider whose name has exactly the bytes of `requested`.
    private func route(_ requested: String) -> Route? {
        if routes.count > Self.routesCompared {
            guard let name = namesByBytes[ByteKey(requested)] else { return nil }
            return routes.first { $0.name.sameBytes(as: name) }
        }
        return routes.first { requested.sameBytes(as: $0.name) }
    }

    /// The configured name whose bytes are exactly `requested`, or nil. Swift's `String ==` would also match a
    /// canonically equivalent spelling (and `[String: _]` lookups do), which is never a provider's name.
    package func configuredName(_ requested: String) -> String? { route(requested)?.name }

    /// The JWS verifier of a configured provider, by exact bytes.
    package func verifier(named requested: String) -> TokenVerifier? { configuredName(requested).flatMap { verifiers[$0] } }

    /// Builds verifiers from configuration. Keys come from each provider's `jwks_file`, or are fetched with
    /// `fetcher` (recorded in `archive` when given); opaque tokens are checked with `fetcher` too. Without a
    /// fetcher, such providers answer `keys_unavailable`.
    /// - Parameter replayStore: the store for `replay: {store: redis}` (made by the caller, which links hiredis);
    ///   a memory store is made here for `store: memory`.
    package init(
        configuration: Configuration, fetcher: (any HTTPFetching)? = nil, archive: KeyArchive? = nil, replayStore: (any ReplayStore)? = nil,
        revocations: RevocationGuard? = nil, clock: WallClock = .system
    ) {
        self.init(
            configuration: configuration, fetchers: { _, _ in fetcher }, archive: archive, replayStore: replayStore, revocations: revocations,
            clock: clock)
    }

    /// As above, with the outbound calls of each provider, and of each of its upstreams, made by a fetcher of its own
    /// (`fetchers(name, purpose)`): an upstream that hangs then holds up only its own calls, not a key fetch queued
    /// behind them (red team: hanging tenant lookups took a Microsoft provider's JWKS fetch with them, and hanging
    /// `debug_token` calls a facebook entry's Limited Login keys).
    package init(
        configuration: Configuration, fetchers: (_ provider: String, _ purpose: OutboundPurpose) -> (any HTTPFetching)?,
        archive: KeyArchive? = nil,
        replayStore: (any ReplayStore)? = nil, revocations: RevocationGuard? = nil, clock: WallClock = .system
    ) {
        var verifiers: [String: TokenVerifier] = [:]
        var opaque: [String: OpaqueTokenVerifier] = [:]
        var resolvers: [String: TenantNameResolver] = [:]
        for provider in configuration.providers {
            // Asked for only where used: a fetcher may be a pool of threads.
            var fetchesKeys = provider.keys != nil
            if case .jwksFile? = provider.keys { fetchesKeys = false }
            let keyFetcher = fetchesKeys ? fetchers(provider.name, .keys) : nil
            let inspectionFetcher = provider.inspectsOpaqueTokens ? fetchers(provider.name, .inspection) : nil
            switch provider.settings {
            case .jws(var policy, let keys):
                if !provider.tenantDomains.isEmpty {
                    let resolver = TenantNameResolver(
                        provider: provider.name, authority: provider.authority, names: provider.tenantDomains,
                        fetcher: fetchers(provider.name, .tenantNames) ?? NoFetcher(),
                        archive: archive, clock: clock)
                    policy.tenantDirectory = resolver
                    resolvers[provider.name] = resolver
                }
                verifiers[provider.name] = TokenVerifier(
                    policy: policy,
                    keySource: Self.keySource(
                        provider.name, keys, configuration, keyFetcher, { fetchers(provider.name, .driftWatch) }, archive, clock),
                    cache: VerifiedTokenCache(capacity: configuration.tokenCacheSize))
            case .facebook(let policy, let keys, let classic):
                verifiers[provider.name] = TokenVerifier(
                    policy: policy,
                    keySource: Self.keySource(
                        provider.name, keys, configuration, keyFetcher, { fetchers(provider.name, .driftWatch) }, archive, clock),
                    cache: VerifiedTokenCache(capacity: configuration.tokenCacheSize))
                if let classic {
                    let inspector = FacebookLoginTokenInspector(
                        providerName: provider.name, appID: classic.clientID, appSecret: classic.secret, graphURL: classic.baseURL,
                        fetcher: inspectionFetcher ?? NoFetcher())
                    opaque[provider.name] = OpaqueTokenVerifier(
                        inspector: inspector, cache: OpaqueVerdictCache(positiveTTL: classic.cacheSeconds), limits: classic.inspectionLimits,
                        clock: clock)
                }
            case .opaque(let settings):
                let inspector: any OpaqueTokenInspector
                let fetcher = inspectionFetcher ?? NoFetcher()
                if provider.kind == .github {
                    inspector = GitHubTokenInspector(
                        providerName: provider.name, clientID: settings.clientID, clientSecret: settings.secret, apiURL: settings.baseURL,
                        fetcher: fetcher)
                } else {
                    inspector = FacebookLoginTokenInspector(
                        providerName: provider.name, appID: settings.clientID, appSecret: settings.secret, graphURL: settings.baseURL,
                        fetcher: fetcher)
                }
                opaque[provider.name] = OpaqueTokenVerifier(
                    inspector: inspector, cache: OpaqueVerdictCache(positiveTTL: settings.cacheSeconds), limits: settings.inspectionLimits,
                    clock: clock)
            }
        }
        var guards: [String: ReplayGuard] = [:]
        var store: (any ReplayStore)? = nil
        if let replay = configuration.replay {
            switch replay.store {
            case .memory(let maximum): store = replayStore ?? MemoryReplayStore(capacity: maximum, clock: clock)
            case .redis: store = replayStore
            }
            if let store {
                for provider in configuration.providers where provider.policy != nil && !provider.replayOptOut {
                    guards[provider.name] = ReplayGuard(
                        provider: provider.name, store: store, leewaySeconds: configuration.leewaySeconds,
                        claimMarginSeconds: Int64(configuration.server.requestTimeoutSeconds) + 1, clock: clock)
                }
            }
        }
        self.init(verifiers: verifiers, opaqueVerifiers: opaque, replayGuards: guards, replayStore: store, clock: clock)
        for provider in configuration.providers {
            forwardAuthPolicies[provider.name] = provider.forwardAuth
            kinds[provider.name] = provider.kind
        }
        routes = Self.routes(names: namesByBytes.values, verifiers: self.verifiers, replayGuards: self.replayGuards, kinds: kinds)
        maxTokenBytes = configuration.maxTokenBytes
        self.revocations = revocations
        tenantResolvers = resolvers
    }

    /// Now, in Unix seconds, by the registry's clock.
    package var now: Int64 { clock.seconds }

    /// The forward-auth policy of a configured provider (by its configured name).
    package func forwardAuthPolicy(_ configuredProvider: String) -> ForwardAuthPolicy {
        forwardAuthPolicies[configuredProvider] ?? ForwardAuthPolicy()
    }

    private static func keySource(
        _ name: String, _ keys: ProviderConfiguration.KeyLocation, _ configuration: Configuration, _ fetcher: (any HTTPFetching)?,
        _ watchFetcher: () -> (any HTTPFetching)?, _ archive: KeyArchive?, _ clock: WallClock
    ) -> any KeySource {
        switch keys {
        case .jwksFile(let path):
            return JWKSFileKeySource(path: path)
        case .jwksURL(let url):
            guard let fetcher else { return UnavailableKeySource(reason: "keys for \(name) are at \(url), and no fetcher is configured") }
            let watched = configuration.provider(named: name).flatMap(Self.watchedDiscoveryURL)
            return JWKSKeySource(
                provider: name, location: .jwks(url), fetcher: fetcher, policy: configuration.keyFetch, archive: archive, clock: clock,
                watchedDiscoveryURL: watched, watchFetcher: watched == nil ? nil : watchFetcher())
        case .discovery(let issuer, let jwksHosts, let devIdP):
            guard let fetcher else {
                return UnavailableKeySource(reason: "keys for \(name) need discovery at \(issuer), and no fetcher is configured")
            }
            return JWKSKeySource(
                provider: name, location: .discovery(issuer: issuer, jwksHosts: jwksHosts, devIdP: devIdP), fetcher: fetcher,
                policy: configuration.keyFetch, archive: archive, clock: clock, watchFetcher: watchFetcher())
        }
    }

    /// The discovery document watched for drift: the built-in providers' published ones (their issuers and JWKS
    /// URLs are fixed in tokenguard, never taken from discovery). `oidc` providers watch the document they discover with.
    static func watchedDiscoveryURL(_ provider: ProviderConfiguration) -> String? {
        guard !provider.devIdP else { return nil }
        switch provider.kind {
        case .apple: return "https://appleid.apple.com/.well-known/openid-configuration"
        case .facebookLimited, .facebook: return "https://limited.facebook.com/.well-known/openid-configuration/"
        case .microsoft: return "\(provider.authority)/common/v2.0/.well-known/openid-configuration"
        case .microsoftExternalID, .oidc, .github, .facebookClassic: return nil
        }
    }

    /// True when some provider calls out over the network (fetched keys or token inspection).
    package static func needsFetcher(_ configuration: Configuration) -> Bool {
        configuration.providers.contains(where: \.callsOut)
    }

    /// The configured provider names, sorted.
    package var providerNames: [String] { Set(Array(verifiers.keys) + Array(opaqueVerifiers.keys)).sorted() }

    /// Verifies one token. JWS tokens are checked with the keys in memory, refetching once (single flight,
    /// rate-limited) on an unknown `kid` or a cold cache; opaque tokens are asked of their provider (cached).
    /// `at` nil means now, with current keys only; a given `at` verifies a logged JWS as of then (archived keys
    /// allowed within their published window). Opaque tokens can only be checked now.
    package func verify(provider: String, token: String, nonce: String?, at: Int64?) async -> VerificationResult {
        await verify(provider: provider, token: token, nonce: nonce, at: at, explain: false).result
    }

    /// One verification, with its explanation when `explain` is set. The signature is checked once and an
    /// explained request claims the token in the replay store exactly as a plain one does.
    /// - Parameter claimReplay: false for a gateway check, where the same bearer token comes with every request: the
    ///   token is verified (and cached) but never claimed in the replay store.
    package func verify(
        provider requested: String, token: String, nonce: String?, at: Int64?, explain: Bool, claimReplay: Bool = true
    ) async -> (result: VerificationResult, explanation: Explanation?) {
        guard let provider = configuredName(requested) else { return (.failure(Self.unknownProvider(requested)), nil) }
        let kind = kinds[provider]
        // Before anything is routed by the token's shape, or asked of an upstream, the size limit (the configuration's,
        // for every token) and, for the Facebook kinds, the alphabet both their forms share. A JWS verifier at hand
        // words that refusal itself, with every check it would have run explained; the routing hint is only ever
        // given to a well-formed token. JWS-only kinds are left to their verifier, which checks the same first.
        let routesByShape = kind == .facebook || kind == .facebookLimited || kind == .facebookClassic
        if routesByShape || verifiers[provider] == nil,
            let refusal = Self.refusalBeforeRouting(token, maxTokenBytes: maxTokenBytes, checkAlphabet: routesByShape)
        {
            if let verifier = verifiers[provider] {
                return await verifyJWS(verifier, provider: provider, token: token, nonce: nonce, at: at, explain: explain, claimReplay: claimReplay)
            }
            return (.failure(refusal), explain ? Self.structureExplanation(refusal) : nil)
        }
        if routesByShape, let hint = Self.routingHint(token, kind: kind) {
            return (.failure(hint), explain ? Self.structureExplanation(hint) : nil)
        }
        if kind == .facebook {
            if token.utf8.count(where: { $0 == UInt8(ascii: ".") }) == 2, let verifier = verifiers[provider] {
                let (result, explanation) = await verifyJWS(
                    verifier, provider: provider, token: token, nonce: nonce, at: at, explain: explain, claimReplay: claimReplay)
                return (Self.withLogin("limited", result), explanation)
            }
            guard opaqueVerifiers[provider] != nil else {
                let refusal = VerificationError(.invalidRequest, "\(provider) takes classic access tokens only with app_secret_env configured")
                let explanation = Explanation(checks: [Explanation.Check(name: "provider", ok: nil, detail: refusal.description)])
                return (.failure(refusal), explain ? explanation : nil)
            }
            let (result, explanation) = await verifyOpaque(provider: provider, token: token, nonce: nonce, at: at, explain: explain)
            return (Self.withLogin("classic", result), explanation)
        }
        if let verifier = verifiers[provider] {
            return await verifyJWS(verifier, provider: provider, token: token, nonce: nonce, at: at, explain: explain, claimReplay: claimReplay)
        }
        if opaqueVerifiers[provider] != nil { return await verifyOpaque(provider: provider, token: token, nonce: nonce, at: at, explain: explain) }
        return (.failure(Self.unknownProvider(requested)), nil)
    }

    /// A `facebook` verdict says which login the token came from.
    static func withLogin(_ login: String, _ result: VerificationResult) -> VerificationResult {
        result.map { verdict in
            var verdict = verdict
            verdict.extra.set("login", .string(login))
            return verdict
        }
    }

    /// What is refused before routing or an upstream: a token over `max_token_bytes` (`token_too_large`, whatever
    /// the provider's kind), and with `checkAlphabet` an empty token or a byte outside the alphabet of both Facebook
    /// forms (`A-Z a-z 0-9 - _ .`). Opaque kinds check their own, narrower alphabet in their inspector.
    static func refusalBeforeRouting(_ token: String, maxTokenBytes: Int, checkAlphabet: Bool) -> VerificationError? {
        let count = token.utf8.count
        guard count <= maxTokenBytes else { return VerificationError(.tokenTooLarge, "token is \(count) bytes; the limit is \(maxTokenBytes)") }
        guard checkAlphabet else { return nil }
        guard !token.isEmpty else { return VerificationError(.malformedToken, "the token is empty") }
        guard CompactJWSAlphabet.admits(token) else { return VerificationError(.malformedToken, CompactJWSAlphabet.refusal) }
        return nil
    }

    /// The Facebook kinds route by the token's shape (two dots: a Limited Login JWS; otherwise a classic access
    /// token): a well-formed token of the form a single-kind provider does not take is told where it goes.
    static func routingHint(_ token: String, kind: ProviderKind?) -> VerificationError? {
        let looksLikeJWS = token.utf8.count { $0 == UInt8(ascii: ".") } == 2
        if kind == .facebookLimited && !looksLikeJWS {
            return VerificationError(
                .malformedToken, "not a Limited Login token (a JWS): a classic access token goes to a facebook or facebook_classic provider")
        }
        if kind == .facebookClassic && looksLikeJWS {
            return VerificationError(
                .malformedToken, "a JWS is not a classic access token: a Limited Login token goes to a facebook or facebook_limited provider")
        }
        return nil
    }

    /// The explanation of a token refused before any verifier saw it.
    static func structureExplanation(_ refusal: VerificationError) -> Explanation {
        Explanation(checks: [Explanation.Check(name: "structure", ok: false, detail: refusal.description)])
    }

    private func verifyJWS(
        _ verifier: TokenVerifier, provider: String, token: String, nonce: String?, at: Int64?, explain: Bool, claimReplay: Bool
    ) async -> (result: VerificationResult, explanation: Explanation?) {
        var (result, explanation) = await verifier.verifyRefreshingKeys(
            token: token, nonce: nonce, at: at ?? clock.seconds, historical: at != nil, explain: explain)
        // Revocations apply to every verdict, cached ones included, before a replay claim is spent on it.
        if let revocations { result = revocations.check(result) }
        // Replay protection runs last, on tokens presented now (a logged token checked at a past time is not a use).
        guard at == nil, claimReplay, let replay = replayGuards[provider] else { return (result, explanation) }
        let checked = await replay.check(result, provider: provider, token: token)
        return (checked, explanation.map { Self.withReplay($0, result: result, checked: checked) })
    }

    private func verifyOpaque(
        provider: String, token: String, nonce: String?, at: Int64?, explain: Bool
    ) async -> (result: VerificationResult, explanation: Explanation?) {
        if let verifier = opaqueVerifiers[provider] {
            let explanation =
                explain
                ? Explanation(checks: [Explanation.Check(name: "provider", ok: nil, detail: "opaque tokens are checked by their provider")]) : nil
            if at != nil {
                return (.failure(VerificationError(.invalidRequest, "\(provider) tokens can only be checked now, not at a past time")), explanation)
            }
            if nonce != nil {
                return (.failure(VerificationError(.invalidRequest, "\(provider) access tokens carry no nonce; do not send one")), explanation)
            }
            let result = await verifier.verify(token: token)
            return (revocations?.check(result) ?? result, explanation)
        }
        return (.failure(Self.unknownProvider(provider)), nil)
    }

    /// The explanation's replay check, from the claim this very request made.
    private static func withReplay(_ explanation: Explanation, result: VerificationResult, checked: VerificationResult) -> Explanation {
        let replay: Explanation.Check
        switch (result, checked) {
        case (.failure, _):
            replay = Explanation.Check(name: "replay", ok: nil, detail: "not run: the token was rejected before the replay check")
        case (.success, .success):
            replay = Explanation.Check(name: "replay", ok: true, detail: "first use: claimed in the replay store")
        case (.success, .failure(let error)):
            replay = Explanation.Check(name: "replay", ok: error.code == .tokenReplayed ? false : nil, detail: error.description)
        }
        return Explanation(checks: explanation.checks.map { $0.name == "replay" ? replay : $0 })
    }

    /// Verifies a JWS with the keys in hand, never waiting on the network (hot loops that fetched up front).
    /// Opaque providers need the network: use ``verify(provider:token:nonce:at:)``.
    package func verifyWithKeysInHand(
        provider requested: String, token: String, nonce: String?, at: Int64?, claimReplay: Bool = true
    ) -> VerificationResult? {
        guard let route = route(requested) else { return .failure(Self.unknownProvider(requested)) }
        let provider = route.name
        // Facebook kinds route by the token's shape and add fields: the full path does that.
        guard let verifier = route.directVerifier else { return nil }
        // A replay claim is made here only with a store that answers at once (memory); Redis is asked by the waiting path.
        let replay = at == nil && claimReplay ? route.replayGuard : nil
        if let replay, !replay.store.claimsWithoutWaiting { return nil }
        var result = verifier.verify(token: token, nonce: nonce, at: at ?? clock.seconds, historical: at != nil)
        if let revocations { result = revocations.check(result) }
        guard let replay else { return result }
        return replay.checkWithoutWaiting(result, provider: provider, token: token)
    }

    /// The verdict for a token presented now when it needs no waiting — a cached verdict, or a full verification with
    /// the keys in hand — exactly as ``verify(provider:token:nonce:at:explain:claimReplay:)`` would give it; nil when
    /// that path must wait (a replay claim, an unknown `kid` or missing keys to fetch, an opaque or Facebook provider).
    package func verifyWithoutWaiting(provider: String, token: String, nonce: String?, claimReplay: Bool) -> VerificationResult? {
        // Only for a provider with tenant names to resolve: whether its keys were in hand *before* the verification
        // tells a tenant name not resolved yet (keys in hand: waiting changes nothing, the 503 stands) from keys not
        // fetched yet (the waiting path fetches them). Read after, keys that arrived meanwhile would be mistaken for
        // the first case.
        var keysWereInHand = false
        if !tenantResolvers.isEmpty, let verifier = verifier(named: provider), verifier.policy.tenantDirectory != nil {
            keysWereInHand = (try? verifier.keySource.currentKeys().get()) != nil
        }
        guard let result = verifyWithKeysInHand(provider: provider, token: token, nonce: nonce, at: nil, claimReplay: claimReplay) else {
            return nil
        }
        guard case .failure(let error) = result else { return result }
        switch error.code {
        case .unknownKey: return nil
        case .keysUnavailable: return keysWereInHand ? result : nil
        default: return result
        }
    }

    /// Fetches every fetching provider's keys once, concurrently (before a batch, or at service start).
    /// Revocations are read too.
    package func prepare() async {
        await withTaskGroup(of: Void.self) { group in
            for source in fetchingSources { group.addTask { await source.refresh() } }
            for resolver in tenantResolvers.values { group.addTask { await resolver.refresh() } }
            if let revocations { group.addTask { await revocations.refresh() } }
        }
    }

    /// Fetches one provider's keys, when it fetches them, and reads revocations.
    package func prepare(provider: String) async {
        await revocations?.refresh()
        if let resolver = configuredName(provider).flatMap({ tenantResolvers[$0] }) { await resolver.refresh() }
        guard let source = verifier(named: provider)?.keySource as? JWKSKeySource else { return }
        await source.refresh()
    }

    package static func unknownProvider(_ name: String) -> VerificationError {
        VerificationError(.unknownProvider, "no provider named \"\(name.excerpt(bytes: 64))\" is configured")
    }
}

/// Stands in for a fetcher where none is configured: every call is an outage, never a verdict.
struct NoFetcher: HTTPFetching {
    func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse {
        throw FetchError(.transport, "no HTTP client is configured")
    }
}
