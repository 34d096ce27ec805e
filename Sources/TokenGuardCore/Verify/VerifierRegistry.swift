import Foundation

/// The configured providers, each with its verifier, looked up by the name requests use.
public struct VerifierRegistry: Sendable {
    public let verifiers: [String: TokenVerifier]
    /// The fetching key sources, for background refresh and readiness.
    public let fetchingSources: [JWKSKeySource]
    private let clock: @Sendable () -> Int64

    public init(verifiers: [String: TokenVerifier], clock: @escaping @Sendable () -> Int64 = VerifierRegistry.systemClock) {
        self.verifiers = verifiers
        self.fetchingSources = verifiers.values.compactMap { $0.keySource as? JWKSKeySource }
        self.clock = clock
    }

    public static let systemClock: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }

    /// Builds verifiers from configuration. Keys come from each provider's `jwks_file`, or are fetched with
    /// `fetcher` (recorded in `archive` when given). Without a fetcher, fetching providers answer `keys_unavailable`.
    public init(
        configuration: Configuration, fetcher: (any HTTPFetching)? = nil, archive: KeyArchive? = nil,
        clock: @escaping @Sendable () -> Int64 = VerifierRegistry.systemClock
    ) {
        var verifiers: [String: TokenVerifier] = [:]
        for provider in configuration.providers {
            let source: any KeySource
            switch provider.keys {
            case .jwksFile(let path):
                source = JWKSFileKeySource(path: path)
            case .jwksURL(let url):
                source =
                    fetcher.map {
                        JWKSKeySource(provider: provider.name, location: .jwks(url), fetcher: $0, policy: configuration.keyFetch, archive: archive)
                    } ?? UnavailableKeySource(reason: "keys for \(provider.name) are at \(url), and no fetcher is configured")
            case .discovery(let issuer):
                source =
                    fetcher.map {
                        JWKSKeySource(
                            provider: provider.name, location: .discovery(issuer: issuer), fetcher: $0, policy: configuration.keyFetch, archive: archive)
                    } ?? UnavailableKeySource(reason: "keys for \(provider.name) need discovery at \(issuer), and no fetcher is configured")
            }
            verifiers[provider.name] = TokenVerifier(policy: provider.policy, keySource: source)
        }
        self.init(verifiers: verifiers, clock: clock)
    }

    /// True when some provider fetches its keys over the network.
    public static func needsFetcher(_ configuration: Configuration) -> Bool {
        configuration.providers.contains { if case .jwksFile = $0.keys { false } else { true } }
    }

    /// Verifies with the keys in hand (no fetch): for batch workers. `at` nil means now, with current keys only;
    /// a given `at` verifies a logged token as of then (archived keys allowed, within their published window).
    public func verify(provider: String, token: String, nonce: String?, at: Int64?) -> VerificationResult {
        guard let verifier = verifiers[provider] else { return .failure(Self.unknownProvider(provider)) }
        return verifier.verify(token: token, nonce: nonce, at: at ?? clock(), historical: at != nil)
    }

    /// Verifies, refetching keys once (single flight, rate-limited) on an unknown `kid` or a cold cache.
    public func verifyRefreshingKeys(provider: String, token: String, nonce: String?, at: Int64?) async -> VerificationResult {
        guard let verifier = verifiers[provider] else { return .failure(Self.unknownProvider(provider)) }
        return await verifier.verifyRefreshingKeys(token: token, nonce: nonce, at: at ?? clock(), historical: at != nil)
    }

    /// Fetches every fetching provider's keys once, concurrently (before a batch, or at service start).
    public func prepare() async {
        await withTaskGroup(of: Void.self) { group in
            for source in fetchingSources { group.addTask { await source.refresh() } }
        }
    }

    /// Fetches one provider's keys, when it fetches them.
    public func prepare(provider: String) async {
        guard let source = verifiers[provider]?.keySource as? JWKSKeySource else { return }
        await source.refresh()
    }

    static func unknownProvider(_ name: String) -> VerificationError {
        VerificationError(.unknownProvider, "no provider named \"\(name.prefix(64))\" is configured")
    }
}
