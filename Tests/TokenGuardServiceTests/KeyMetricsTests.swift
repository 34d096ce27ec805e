import Metrics
import MetricsTestKit
import Testing
import TokenGuardCore
import TokenGuardFetch
import TokenGuardService
import TokenGuardTestSupport

/// One metrics backend for the whole test process (swift-metrics can be bootstrapped once).
enum SharedMetrics {
    static let backend: TestMetrics = {
        let metrics = TestMetrics()
        MetricsSystem.bootstrap(metrics)
        return metrics
    }()
}

struct KeyMetricsTests {
    @Test("fetches are counted by outcome; unknown-kid refetches by performed or suppressed; keys per provider")
    func metrics() async throws {
        let metrics = SharedMetrics.backend
        let provider = "metrics-\(UInt32.random(in: 0...UInt32.max))"
        let key = try SharedTestKeys.rsa()
        let idp = try JWKSKeySourceTests.IdP(keys: [key])
        let source = JWKSKeySource(provider: provider, location: .jwks(idp.url), fetcher: JWKSKeySourceTests.client())
        await source.refresh()
        idp.fail(with: FakeHTTPServer.Response(status: 500))
        await source.refresh()
        idp.fail(with: nil)
        // Past the failure's backoff (1 s ± 10 %): until then an unknown kid refetches nothing.
        try await Task.sleep(for: .milliseconds(1200))
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: source)
        let claims = ProviderTokens.apple(now: Verifiers.now, rawNonce: "n")
        for index in 0..<5 {
            _ = await verifier.verifyRefreshingKeys(token: try key.sign(claims, keyID: "unknown-\(index)"), nonce: "n", at: Verifiers.now)
        }
        #expect(metrics.counterTotal(label: "tokenguard_jwks_fetches_total", dimensions: [("provider", provider), ("outcome", "ok")]) == 2)
        #expect(metrics.counterTotal(label: "tokenguard_jwks_fetches_total", dimensions: [("provider", provider), ("outcome", "http_error")]) == 1)
        #expect(
            metrics.counterTotal(label: "tokenguard_unknown_kid_refetches_total", dimensions: [("provider", provider), ("outcome", "performed")]) == 1
        )
        #expect(
            metrics.counterTotal(label: "tokenguard_unknown_kid_refetches_total", dimensions: [("provider", provider), ("outcome", "suppressed")])
                == 4)
        let keys = try metrics.expectGauge("tokenguard_keys", [("provider", provider)])
        #expect(keys.lastValue == 1)
    }
}
