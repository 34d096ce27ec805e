import Dispatch
import Foundation
import TokenGuardService

@testable import TokenGuardCore

/// A whole upstream reply (status, headers, body) to the opaque providers' inspectors, and a discovery document
/// to the JWKS key source: nothing any upstream sends may reach a trap, and a reply only counts when every field
/// that decides validity is well-formed.
///
/// Input layout: byte 0 picks the status (100 + value × 2), then header lines up to a blank line, then the body.
enum UpstreamFuzzTarget {
    static let now: Int64 = 1_767_222_000

    struct Canned: HTTPFetching {
        let response: HTTPResponse
        func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse { response }
    }

    /// Splits the input into a response, its header lines read by the reader libcurl's lines go through (nil when it
    /// refuses them: the fetch fails).
    static func response(_ bytes: [UInt8]) -> HTTPResponse? {
        guard let first = bytes.first else { return nil }
        let rest = Array(bytes.dropFirst())
        var reader = ResponseHeaderReader()
        var bodyStart = rest.count
        var lineStart = 0
        for index in rest.indices where rest[index] == 0x0A {
            let line = rest[lineStart...index]
            guard case .success = reader.read(line: line) else { return nil }
            lineStart = index + 1
            if line.count == 1 || (line.count == 2 && line.first == 0x0D) {
                bodyStart = lineStart
                break
            }
        }
        return HTTPResponse(status: 100 + Int(first) * 2, headers: reader.headers, body: Array(rest[bodyStart...]))
    }

    static func blocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let semaphore = DispatchSemaphore(value: 0)
        let box = Box<T>()
        Task {
            box.value = await body()
            semaphore.signal()
        }
        semaphore.wait()
        return box.value!
    }

    final class Box<T>: @unchecked Sendable {
        // @unchecked Sendable: written once by the task before the semaphore is signalled, read after.
        var value: T?
    }

    static let opaque = FuzzTarget(name: "opaque", summary: "GitHub and Graph replies (status, headers, body) to the opaque inspectors") { bytes in
        guard let response = response(bytes) else { return }
        let fetcher = Canned(response: response)
        let github = GitHubTokenInspector(providerName: "github", clientID: "Iv1.abc", clientSecret: "secret", fetcher: fetcher)
        let graph = FacebookLoginTokenInspector(providerName: "facebook_classic", appID: "123", appSecret: "secret", fetcher: fetcher)
        let (fromGitHub, fromGraph) = blocking {
            (await github.inspect("gho_abc", now: Double(now)), await graph.inspect("EAAB", now: Double(now)))
        }
        for result in [fromGitHub, fromGraph] {
            switch result {
            case .success(let verdict):
                require(response.status == 200, "a \(response.status) reply was accepted")
                if let expiresAt = verdict.expiresAt { require(expiresAt > now, "an expired token was accepted") }
            case .failure(let error):
                if let seconds = error.retryAfterSeconds { require((1...3600).contains(seconds), "Retry-After \(seconds) out of range") }
            }
        }
        if case .success(let verdict) = fromGraph {
            let data = (try? JSONParser.parseObject(response.body))?["data"]?.objectValue
            require(data?["is_valid"] == .bool(true), "Graph accepted without is_valid true")
            require(data?["app_id"] == .string("123"), "Graph accepted another app's token")
            if data?["expires_at"] != nil && data?["expires_at"] != .integer(0) {
                require(verdict.expiresAt != nil, "Graph's expires_at was present but ignored")
            }
        }
        if case .success(let verdict) = fromGitHub, let expires = (try? JSONParser.parseObject(response.body))?["expires_at"], expires != .null {
            require(verdict.expiresAt != nil, "GitHub's expires_at was present but ignored")
        }
    }

    /// The issuer the discovery target configures; `jwks_hosts` adds one more host.
    static let issuer = "https://idp.example"

    final class Recorder: HTTPFetching, @unchecked Sendable {
        // @unchecked Sendable: one discovery at a time per input.
        let document: [UInt8]
        var requested: [String] = []
        init(document: [UInt8]) { self.document = document }
        func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse {
            requested.append(request.url)
            if request.url == issuer + "/.well-known/openid-configuration" { return HTTPResponse(status: 200, headers: [], body: document) }
            return HTTPResponse(status: 200, headers: [], body: Array("{\"keys\":[]}".utf8))
        }
    }

    static let discovery = FuzzTarget(name: "discovery", summary: "OpenID discovery documents to the JWKS key source") { bytes in
        let recorder = Recorder(document: bytes)
        let source = JWKSKeySource(
            provider: "corp", location: .discovery(issuer: issuer, jwksHosts: ["keys.example"], devIdP: false), fetcher: recorder)
        _ = blocking { await source.refresh() }
        for url in recorder.requested.dropFirst() {
            guard let (scheme, host) = try? OutboundURL.validate(url) else { fatalError("fetched an invalid URL") }
            require(scheme == "https", "fetched a discovered jwks_uri over \(scheme)")
            require(host == "idp.example" || host == "keys.example", "fetched a discovered jwks_uri on host \(host)")
            // An independent parse must agree on the host (no parser differential hides another host).
            let components = URLComponents(string: url)
            require(components?.host.map(ASCII.lowercased) == host, "URLComponents sees host \(components?.host ?? "none"), tokenguard \(host)")
        }
    }
}
