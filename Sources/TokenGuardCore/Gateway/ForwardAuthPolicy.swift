/// How a provider answers gateway checks (`/v1/authz/{provider}`; config `forward_auth`): where the token and the
/// nonce come from, whether a refusal is enforced or only reported, and which verdict fields go to the upstream as
/// headers.
public struct ForwardAuthPolicy: Sendable, Equatable {
    public enum Mode: String, Sendable, Equatable {
        /// Refusals are 401s: the gateway stops the request.
        case enforce
        /// Every check answers 200 with the would-be verdict in `X-Tokenguard-Verdict` (rolling a verifier in).
        case shadow
    }

    /// The lower-case header the token is read from: `authorization` (as `Bearer <token>`) or another header holding
    /// the token itself. nil: only the cookie.
    public var tokenHeader: String?
    /// A cookie holding the token, used when the header is absent.
    public var tokenCookie: String?
    /// The lower-case header carrying the raw nonce, if any.
    public var nonceHeader: String
    public var mode: Mode
    public var claimHeaders: [ClaimHeader]

    public init(
        tokenHeader: String? = "authorization", tokenCookie: String? = nil, nonceHeader: String = "x-tokenguard-nonce", mode: Mode = .enforce,
        claimHeaders: [ClaimHeader] = []
    ) {
        self.tokenHeader = tokenHeader
        self.tokenCookie = tokenCookie
        self.nonceHeader = nonceHeader
        self.mode = mode
        self.claimHeaders = claimHeaders
    }

    /// A claim header value longer than this is left out (and counted).
    public static let maximumClaimValueBytes = 4096
    /// All claim headers together (names, values and separators) stay under this.
    public static let maximumClaimHeaderBytes = 8192

    /// The claim headers for a verified token, in configured order: each whose value exists and fits, how many
    /// `claims.*` headers were left out for their size, and the first verdict-field header that could not be sent.
    /// Verdict fields are placed first, so a large claim configured before them cannot crowd out the identity; one
    /// that still does not fit (a 1,024-byte `sub` of control characters is 6 KiB written) fails the check, since an
    /// upstream must never receive a verified request without the identity it keys on (red team 23).
    public func claimHeaderValues(for verdict: Verdict) -> (headers: [(name: String, value: String)], omitted: Int, unsent: String?) {
        var values = [String?](repeating: nil, count: claimHeaders.count)
        var total = 0
        for (index, header) in claimHeaders.enumerated() where !header.source.typeVaries {
            guard let value = header.source.value(in: verdict) else { continue }
            let encoded = ClaimHeaderValue.encode(value, typeVaries: false)
            guard Self.fits(name: header.name, value: encoded, total: &total) else { return ([], 0, header.name) }
            values[index] = encoded
        }
        var omitted = 0
        for (index, header) in claimHeaders.enumerated() where header.source.typeVaries {
            guard let value = header.source.value(in: verdict) else { continue }
            let encoded = ClaimHeaderValue.encode(value, typeVaries: true)
            guard Self.fits(name: header.name, value: encoded, total: &total) else {
                omitted += 1
                continue
            }
            values[index] = encoded
        }
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(claimHeaders.count)
        for (index, header) in claimHeaders.enumerated() {
            if let value = values[index] { headers.append((header.name, value)) }
        }
        return (headers, omitted, nil)
    }

    /// Whether one more header fits within both limits; counts it into `total` when it does.
    private static func fits(name: String, value: String, total: inout Int) -> Bool {
        let size = name.utf8.count + 2 + value.utf8.count + 2
        guard value.utf8.count <= maximumClaimValueBytes, total + size < maximumClaimHeaderBytes else { return false }
        total += size
        return true
    }
}

/// One configured claim header: a validated lower-case name and the verdict field it carries.
public struct ClaimHeader: Sendable, Equatable {
    public let name: String
    public let source: ClaimSource

    /// Names that belong to the connection, the message framing, caching, proxies or tokenguard itself (every field it
    /// puts on an answer), never to a claim: a claim header named `cache-control` would stand beside `no-store`.
    public static let reservedNames: Set<String> = [
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding",
        "upgrade", "content-length", "content-type", "content-encoding", "content-range", "content-location", "host", "authorization",
        "cookie", "set-cookie", "www-authenticate", "retry-after", "date", "server", "location", "expect", "forwarded", "x-real-ip", "via",
        "cache-control", "expires", "pragma", "vary", "age", "etag", "last-modified", "surrogate-control", "cdn-cache-control",
    ]

    /// Name prefixes gateways act on (nginx `X-Accel-Redirect`, Envoy's own headers, the client's forwarding chain).
    public static let reservedPrefixes = ["x-tokenguard-", "x-accel-", "x-envoy-", "x-forwarded-", "x-original-", ":"]

    /// A claim header, or why the name cannot be one: RFC 9110 token characters only, at most 64 bytes, not a
    /// hop-by-hop, framing or `X-Tokenguard-*` name. The name is kept lower-case.
    public static func make(name: String, source: ClaimSource) -> Result<ClaimHeader, ClaimHeaderError> {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 64, bytes.allSatisfy(HTTPToken.isTokenCharacter) else {
            return .failure(ClaimHeaderError("\"\(name.excerpt(bytes: 64))\" is not an HTTP header name (RFC 9110 token characters, 1 to 64)"))
        }
        let lower = ASCII.lowercased(name)
        guard !reservedNames.contains(lower) else { return .failure(ClaimHeaderError("\(lower) is a reserved header name")) }
        if let prefix = reservedPrefixes.first(where: { lower.hasPrefix($0) }) {
            return .failure(ClaimHeaderError("\(prefix)* names belong to tokenguard or the gateway"))
        }
        return .success(ClaimHeader(name: lower, source: source))
    }

    private init(name: String, source: ClaimSource) {
        self.name = name
        self.source = source
    }
}

public struct ClaimHeaderError: Error, Sendable, Equatable {
    public let message: String
    public init(_ message: String) { self.message = message }
}

/// The verdict field a claim header carries.
public enum ClaimSource: Sendable, Equatable {
    case userID, subject, tenantID, issuer, audience, expiresAt
    /// The email address, only when the provider vouches for it (`email_verified` true).
    case verifiedEmail
    /// A payload claim by path (`claims.groups`, `claims.address.country`); `claims.email` is the raw, unverified
    /// claim.
    case claim([String])

    /// Parses a config value: `user_id`, `subject`, `tenant_id`, `email`, `issuer`, `audience`, `expires_at`, or
    /// `claims.<name>[.<name>...]`.
    public init?(parsing text: String) {
        switch text {
        case "user_id": self = .userID
        case "subject": self = .subject
        case "tenant_id": self = .tenantID
        case "email": self = .verifiedEmail
        case "issuer": self = .issuer
        case "audience": self = .audience
        case "expires_at": self = .expiresAt
        default:
            guard text.utf8.starts(with: "claims.".utf8), text.utf8.count <= 256 else { return nil }
            let path = text.utf8.dropFirst(7).split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            guard !path.isEmpty, path.allSatisfy({ !$0.isEmpty }) else { return nil }
            self = .claim(path.map { String(decoding: $0, as: UTF8.self) })
        }
    }

    /// True for payload claims, whose JSON type can differ from token to token; the verdict fields always have one
    /// type (strings, and an integer `expires_at`).
    public var typeVaries: Bool {
        if case .claim = self { return true }
        return false
    }

    /// The value in a verdict, or nil when the token does not carry it.
    public func value(in verdict: Verdict) -> JSONValue? {
        switch self {
        case .userID: return .string(verdict.userID)
        case .subject: return .string(verdict.subject)
        case .tenantID: return verdict.tenantID.map(JSONValue.string)
        case .verifiedEmail: return verdict.emailVerified ? verdict.email.map(JSONValue.string) : nil
        case .issuer: return .string(verdict.issuer)
        case .audience: return .string(verdict.audience)
        case .expiresAt: return verdict.expiresAt.map(JSONValue.integer)
        case .claim(let path):
            guard let first = path.first, var value = verdict.claim(first) else { return nil }
            for name in path.dropFirst() {
                guard let next = value.objectValue?[name] else { return nil }
                value = next
            }
            return value == .null ? nil : value
        }
    }
}

/// How a claim value is written into a header: a plain string as it is; anything else (numbers, booleans, arrays,
/// objects, strings with any other character) as compact JSON in printable ASCII with `\u` escapes. No value can
/// carry CR, LF, NUL or any byte a header parser might split on or mangle.
///
/// For a payload claim (`claims.*`, whose type can vary between tokens) only a plain word goes as it is
/// (``isPlainWord(_:)``), so no two values of one claim give the same header however leniently an upstream reads it.
public enum ClaimHeaderValue {
    /// A verdict field's string (never of another type) goes as it is when it is printable ASCII without blanks at
    /// its edges and does not begin with `"`, as every JSON-written string does: `é` (written `"\u00e9"`) and the
    /// printable text `"\u00e9"` must not give one header (red team 20). A claim's string goes as it is only when it is
    /// a plain word.
    public static func encode(_ value: JSONValue, typeVaries: Bool = true) -> String {
        if case .string(let string) = value {
            let plain =
                typeVaries
                ? isPlainWord(string)
                : !string.isEmpty && string.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) && string.utf8.first != 0x20
                    && string.utf8.last != 0x20 && string.utf8.first != UInt8(ascii: "\"")
            if plain { return string }
        }
        return String(decoding: JSONWriter.asciiBytes(value), as: UTF8.self)
    }

    /// A claim's text that no JSON reader, however lenient, can read as anything but itself: only letters, digits and
    /// `- . _ @ + ~`, not beginning as a number (a digit, `-`, `+`, `.`) nor with a literal in any case (`true`,
    /// `false`, `null`, `nan`, `infinity`). An allow-list, not a list of what readers are known to take: Gson's
    /// lenient mode ends an unquoted word at a blank or any of `/ \ ; # = { } [ ] : ,` and reads `#` and `//` as
    /// comments (`admin#x` read as `admin`), Go's decoder and Python's `raw_decode` stop after the first value
    /// (`trueblue` read as `true`), Python reads `NaN`, JSON5 takes `'x'` and `+1`, and JavaScript reads
    /// `["admin",1e999]` as an array holding "admin" (red teams 23, 24, 26).
    static func isPlainWord(_ text: String) -> Bool {
        let bytes = text.utf8
        guard let first = bytes.first else { return false }
        switch first {
        case UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "0")...UInt8(ascii: "9"): return false
        default: break
        }
        guard bytes.allSatisfy(isWordByte) else { return false }
        // Compared in place, any case: `byte | 0x20` equals a lower-case letter only for that letter in either case.
        return !lenientLiterals.contains { literal in bytes.starts(with: literal.utf8) { $0 | 0x20 == $1 } }
    }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "+"), UInt8(ascii: "~"):
            return true
        default: return false
        }
    }

    private static let lenientLiterals = ["true", "false", "null", "nan", "infinity"]
}

/// RFC 9110 `token` characters (header names, cookie names, auth schemes).
public enum HTTPToken {
    @inlinable
    public static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"),
            UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"),
            UInt8(ascii: "~"):
            return true
        default: return false
        }
    }
}
