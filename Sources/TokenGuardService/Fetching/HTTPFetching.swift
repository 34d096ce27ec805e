import TokenGuardCore

/// An outbound HTTP request to a provider (JWKS, discovery, token inspection).
package struct HTTPRequest: Sendable {
    package enum Method: String, Sendable {
        case get = "GET"
        case post = "POST"
    }

    package var url: String
    package var method: Method
    package var headers: [(String, String)]
    package var body: [UInt8]?
    /// Responses larger than this are refused (1 MiB for JWKS).
    package var maximumResponseBytes: Int

    package init(
        url: String, method: Method = .get, headers: [(String, String)] = [], body: [UInt8]? = nil,
        maximumResponseBytes: Int = 1 << 20
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.maximumResponseBytes = maximumResponseBytes
    }
}

package struct HTTPResponse: Sendable {
    package let status: Int
    /// Header names are lowercased.
    package let headers: [(String, String)]
    package let body: [UInt8]

    package init(status: Int, headers: [(String, String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The last value of a header, by case-insensitive name.
    package func header(_ name: String) -> String? {
        let lower = ASCII.lowercased(name)
        return headers.last { $0.0.sameBytes(as: lower) }?.1
    }

    /// Every value of a list-valued header, joined with commas as RFC 9110 §5.3 combines repeated lines (a CDN's
    /// added `Cache-Control: public` line must not hide the origin's `no-store`); nil when absent.
    package func combinedHeader(_ name: String) -> String? {
        let lower = ASCII.lowercased(name)
        let values = headers.filter { $0.0.sameBytes(as: lower) }.map(\.1)
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }
}

/// Why an outbound call produced no response. Always an outage to the verifier, never a token fault.
package struct FetchError: Error, Sendable, CustomStringConvertible {
    package enum Kind: String, Sendable {
        case invalidURL = "invalid_url"
        case connect
        case timeout
        case tls
        case tooLarge = "too_large"
        case redirect
        case transport
        /// The caller stopped waiting (a shutdown, a request answered by its timeout): no fault of the upstream's.
        case cancelled
    }

    package let kind: Kind
    package let message: String

    package init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    package var description: String { "\(kind.rawValue): \(message)" }
}

/// The core's view of an HTTP client. `TokenGuardFetch` implements it on libcurl; tests may inject others.
package protocol HTTPFetching: Sendable {
    func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse
}

/// The rule for every outbound URL: `https`, or plain `http` to a loopback address only (tests, the dev IdP).
package enum OutboundURL {
    package static let loopbackHosts: Set<String> = ["127.0.0.1", "localhost", "::1", "[::1]"]

    /// The URL's scheme and host, or an error saying why it may not be called.
    package static func validate(_ url: String) throws(FetchError) -> (scheme: String, host: String) {
        // A URL is ASCII (IDNs travel punycoded); Unicode case mapping would let U+212A KELVIN SIGN pass for "k".
        guard url.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw FetchError(.invalidURL, "the URL has a byte outside printable ASCII") }
        guard let schemeEnd = url.firstRange(of: "://") else { throw FetchError(.invalidURL, "not an absolute URL") }
        let scheme = ASCII.lowercased(String(url[..<schemeEnd.lowerBound]))
        let rest = url[schemeEnd.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.contains("@") else { throw FetchError(.invalidURL, "credentials in the URL are not allowed") }
        var host = String(authority)
        if host.hasPrefix("[") {
            if let close = host.firstIndex(of: "]") { host = String(host[...close]) }
        } else if let colon = host.lastIndex(of: ":") {
            host = String(host[..<colon])
        }
        host = ASCII.lowercased(host)
        guard !host.isEmpty else { throw FetchError(.invalidURL, "no host") }
        switch scheme {
        case "https": return (scheme, host)
        case "http" where loopbackHosts.contains(host): return (scheme, host)
        case "http": throw FetchError(.invalidURL, "plain http is allowed only to loopback addresses; use https")
        default: throw FetchError(.invalidURL, "scheme \(scheme.excerpt(bytes: 16)) is not allowed")
        }
    }
}

extension OutboundURL {
    /// A host name or address as `jwks_hosts` lists it: ASCII letters, digits, `-`, `.` (or a bracketed IPv6 address:
    /// hex digits, `:` and `.` between the brackets). Nothing else: a "host" holding a comma or a blank would read as
    /// two hosts in the key archive's record of where keys came from (red team 22).
    package static func isPlausibleHost(_ host: String) -> Bool {
        let bytes = Array(host.utf8)
        guard !bytes.isEmpty, bytes.count <= 253 else { return false }
        if bytes.first == UInt8(ascii: "[") {
            guard bytes.count > 3, bytes.last == UInt8(ascii: "]") else { return false }
            return bytes.dropFirst().dropLast().allSatisfy { byte in
                byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte | 0x20)
            }
        }
        return bytes.allSatisfy { CompactJWSAlphabet.isAllowed($0) && $0 != UInt8(ascii: "_") }
    }

    /// The rule for a `jwks_uri` found through discovery (OIDC Discovery hands us a URL from the network): https
    /// to the issuer's own host or a host the provider lists in `jwks_hosts`; plain http only with `dev_idp`, and then
    /// only to the issuer's own loopback host. Returns the URL, or why it is refused.
    package static func validateDiscoveredJWKS(_ jwksURI: String, issuer: String, jwksHosts: [String], devIdP: Bool) throws(FetchError) -> String {
        let (scheme, host) = try validate(jwksURI)
        let port = try Self.port(of: jwksURI, scheme: scheme)
        let (issuerScheme, issuerHost) = try validate(issuer)
        let issuerPort = try Self.port(of: issuer, scheme: issuerScheme)
        // The issuer's own origin (scheme, host and port: another port is another service), or a listed host on 443.
        let sameOrigin = scheme.sameBytes(as: issuerScheme) && host.sameBytes(as: issuerHost) && port == issuerPort
        switch scheme {
        case "https":
            guard sameOrigin || (jwksHosts.containsBytes(host) && port == 443) else {
                throw FetchError(
                    .invalidURL,
                    "\(host.excerpt(bytes: 128)):\(port) is neither the issuer's origin (\(issuerHost):\(issuerPort)) nor a jwks_hosts host on 443")
            }
        default:
            guard devIdP, sameOrigin else {
                throw FetchError(.invalidURL, "a discovered jwks_uri must use https (plain http only to the dev IdP issuer's own origin)")
            }
        }
        return jwksURI
    }

    /// The URL's port: explicit, or the scheme's default. A port that is not 1–65535 in decimal is refused.
    static func port(of url: String, scheme: String) throws(FetchError) -> Int {
        guard let schemeEnd = url.firstRange(of: "://") else { throw FetchError(.invalidURL, "not an absolute URL") }
        let authority = url[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var hostAndPort = Substring(authority)
        if hostAndPort.hasPrefix("["), let close = hostAndPort.firstIndex(of: "]") { hostAndPort = hostAndPort[hostAndPort.index(after: close)...] }
        guard let colon = hostAndPort.lastIndex(of: ":") else { return scheme == "https" ? 443 : 80 }
        let digits = hostAndPort[hostAndPort.index(after: colon)...]
        guard !digits.isEmpty, digits.count <= 5, digits.utf8.allSatisfy({ (48...57).contains($0) }), let port = Int(digits),
            (1...65535).contains(port)
        else { throw FetchError(.invalidURL, "the port is not a number from 1 to 65535") }
        return port
    }
}

/// What a provider calls out for; each gets its own fetcher (and pool of threads), so that one upstream hanging
/// does not hold up another's calls.
package enum OutboundPurpose: String, Sendable, CaseIterable {
    /// JWKS and discovery documents.
    case keys
    /// Microsoft tenant names resolved to tenant ids.
    case tenantNames = "tenant-names"
    /// Opaque token inspection (GitHub, Facebook's `debug_token`): a call per uncached sign-in.
    case inspection
    /// A provider's published discovery document, watched for drift (never trusted): one at a time.
    case driftWatch = "drift-watch"

    /// Concurrent transfers: inspections come with sign-ins; keys and tenant names are fetched now and then, and a
    /// second thread lets a refresh run beside one that hangs.
    package var threads: Int {
        switch self {
        case .inspection: 4
        case .keys, .tenantNames: 2
        case .driftWatch: 1
        }
    }
}
