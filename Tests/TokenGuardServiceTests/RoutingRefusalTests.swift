import Foundation
import Synchronization
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

/// Size and alphabet refusals come before any routing by the token's shape, for every provider kind (red team round 8:
/// classic tokens escaped `max_token_bytes`, and the routing hints and the secret-less `facebook` answer came first).
struct RoutingRefusalTests {
    /// Counts what would have reached Graph or GitHub; answers as an outage, never a verdict.
    final class CountingFetcher: HTTPFetching {
        let calls = Mutex(0)
        func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse {
            calls.withLock { $0 += 1 }
            throw FetchError(.transport, "counted, not sent")
        }
    }

    static let limit = 512

    static func registry(_ fetcher: CountingFetcher, _ workspace: TempWorkspace) throws -> VerifierRegistry {
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([try SharedTestKeys.rsa()]))
        let yaml = """
            max_token_bytes: \(limit)
            providers:
              facebook: { kind: facebook, app_id: "1", app_secret_env: TG_FB, jwks_file: "\(jwks)" }
              fb_limited_only: { kind: facebook, app_id: "1", jwks_file: "\(jwks)" }
              facebook_limited: { audiences: ["1"], jwks_file: "\(jwks)" }
              facebook_classic: { app_id: "1", app_secret_env: TG_FB }
              github: { client_id: "Iv1.abc", client_secret_env: TG_GH }
              apple: { audiences: ["a"], jwks_file: "\(jwks)" }
            """
        let configuration = try Configuration.parse(yaml: yaml, environment: ["TG_FB": "fb-secret", "TG_GH": "gh-secret"])
        return VerifierRegistry(configuration: configuration, fetcher: fetcher)
    }

    static func refusal(_ registry: VerifierRegistry, _ provider: String, _ token: String) async -> VerificationError? {
        guard case .failure(let error) = await registry.verify(provider: provider, token: token, nonce: nil, at: nil) else { return nil }
        return error
    }

    @Test("a token over max_token_bytes is token_too_large for every kind, classic and opaque included, and never reaches an upstream")
    func sizeFirstForEveryKind() async throws {
        let fetcher = CountingFetcher()
        let workspace = try TempWorkspace()
        let registry = try Self.registry(fetcher, workspace)
        let justOver = String(repeating: "A", count: Self.limit + 1)
        let jwsOver = "eyJ" + String(repeating: "A", count: Self.limit) + ".e30.AA"
        for provider in ["facebook", "fb_limited_only", "facebook_limited", "facebook_classic", "github", "apple"] {
            for token in [justOver, jwsOver, justOver + "!"] {
                let error = await Self.refusal(registry, provider, token)
                #expect(error?.code == .tokenTooLarge, "\(provider), \(token.utf8.count) bytes: \(String(describing: error))")
            }
        }
        #expect(fetcher.calls.withLock { $0 } == 0)
        // At the limit a classic token is still asked about (the inspector's own 1 KiB cap is above this limit).
        let atLimit = String(repeating: "A", count: Self.limit)
        #expect(await Self.refusal(registry, "facebook_classic", atLimit)?.code == .keysUnavailable)
        #expect(fetcher.calls.withLock { $0 } == 1)
    }

    @Test("the path with the keys in hand leaves the Facebook kinds (routed by the token's shape) and opaque providers to the full path")
    func keysInHandRoutes() async throws {
        let fetcher = CountingFetcher()
        let workspace = try TempWorkspace()
        let registry = try Self.registry(fetcher, workspace)
        for provider in ["facebook", "fb_limited_only", "facebook_limited", "facebook_classic", "github"] {
            #expect(registry.verifyWithKeysInHand(provider: provider, token: "a.b.c", nonce: nil, at: nil) == nil, "\(provider)")
        }
        let answer = registry.verifyWithKeysInHand(provider: "apple", token: "a.b.c", nonce: nil, at: nil)
        #expect(answer?.code == .malformedToken, "\(String(describing: answer))")
        #expect(registry.verifyWithKeysInHand(provider: "Apple", token: "a.b.c", nonce: nil, at: nil)?.code == .unknownProvider)
        #expect(fetcher.calls.withLock { $0 } == 0)
    }

    @Test("the Facebook kinds refuse a byte outside the alphabet before any routing hint or secret-less answer")
    func alphabetBeforeRouting() async throws {
        let fetcher = CountingFetcher()
        let workspace = try TempWorkspace()
        let registry = try Self.registry(fetcher, workspace)
        let badJWS = "eyJhbGciOiJSUzI1NiJ9.e30.A!A"
        let badClassic = "EAAB wzLixnj"
        for provider in ["facebook", "fb_limited_only", "facebook_limited", "facebook_classic"] {
            for token in [badJWS, badClassic, "EAAB\u{212A}x", "a.b.c\u{0}"] {
                let error = await Self.refusal(registry, provider, token)
                #expect(error?.code == .malformedToken, "\(provider) \(token.debugDescription)")
                #expect(error?.message == CompactJWSAlphabet.refusal, "\(provider) \(token.debugDescription): \(String(describing: error))")
            }
            #expect(await Self.refusal(registry, provider, "")?.code == .malformedToken)
        }
        #expect(fetcher.calls.withLock { $0 } == 0)
        // A well-formed token of the other form still gets the hint, or the secret-less answer.
        #expect(await Self.refusal(registry, "facebook_classic", "a.b.c")?.message.contains("facebook_limited") == true)
        #expect(await Self.refusal(registry, "facebook_limited", "EAABwz")?.message.contains("facebook_classic") == true)
        #expect(await Self.refusal(registry, "fb_limited_only", "EAABwz")?.code == .invalidRequest)
        // A hint explained says which check refused it.
        let explained = await registry.verify(provider: "facebook_classic", token: "a.b.c", nonce: nil, at: nil, explain: true)
        #expect(explained.explanation?.checks.map(\.name) == ["structure"])
        #expect(explained.explanation?.checks.first?.ok == false)
        // A refusal a JWS verifier would give is its own, with every check explained, as for a JWS-only provider
        // (red team: an oversized token explained one check where the verifier lists them all).
        let oversized = String(repeating: "A", count: Self.limit + 1)
        for provider in ["apple", "facebook_limited", "facebook", "fb_limited_only"] {
            let answer = await registry.verify(provider: provider, token: oversized, nonce: nil, at: nil, explain: true)
            #expect(answer.result.code == .tokenTooLarge, "\(provider)")
            let checks = answer.explanation?.checks ?? []
            #expect(checks.count > 10 && checks.first?.name == "structure" && checks.first?.ok == false, "\(provider): \(checks.map(\.name))")
        }
        let opaque = await registry.verify(provider: "github", token: oversized, nonce: nil, at: nil, explain: true)
        #expect(opaque.result.code == .tokenTooLarge && opaque.explanation?.checks.map(\.name) == ["structure"])
        let secretless = await registry.verify(provider: "fb_limited_only", token: "EAABwz", nonce: nil, at: nil, explain: true)
        #expect(secretless.result.code == .invalidRequest && secretless.explanation?.checks.map(\.name) == ["provider"])
    }
}
