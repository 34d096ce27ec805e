/// The configured providers, each with its verifier, looked up by the name requests use.
public struct VerifierRegistry: Sendable {
    public let verifiers: [String: TokenVerifier]

    public init(verifiers: [String: TokenVerifier]) { self.verifiers = verifiers }

    /// Builds verifiers from configuration; keys come from each provider's `jwks_file`, or from `fetchingSource`
    /// for a `jwks_url` (nil: this process has no fetcher, so such providers answer `keys_unavailable`).
    public init(configuration: Configuration, fetchingSource: ((ProviderConfiguration, String) -> any KeySource)? = nil) {
        var verifiers: [String: TokenVerifier] = [:]
        for provider in configuration.providers {
            let source: any KeySource
            switch provider.keys {
            case .jwksFile(let path):
                source = JWKSFileKeySource(path: path)
            case .jwksURL(let url):
                source =
                    fetchingSource?(provider, url)
                    ?? UnavailableKeySource(reason: "keys for \(provider.name) are at \(url), and this build cannot fetch JWKS; pin them with jwks_file")
            }
            verifiers[provider.name] = TokenVerifier(policy: provider.policy, keySource: source)
        }
        self.verifiers = verifiers
    }

    /// Verifies a token for the named provider; an unknown name is `unknown_provider`.
    public func verify(provider: String, token: String, nonce: String?, at now: Int64) -> VerificationResult {
        guard let verifier = verifiers[provider] else {
            return .failure(VerificationError(.unknownProvider, "no provider named \"\(provider.prefix(64))\" is configured"))
        }
        return verifier.verify(token: token, nonce: nonce, at: now)
    }
}
