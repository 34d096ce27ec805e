import TokenGuardCrypto

/// The kinds of provider the contract defines.
public enum ProviderKind: String, Sendable, CaseIterable {
    case apple
    case facebookLimited = "facebook_limited"
    case microsoft
    case oidc
    case github
    case facebookClassic = "facebook_classic"
    /// Microsoft Entra External ID (CIAM): one tenant, issuer `https://{tenant}.ciamlogin.com/{tenant}/v2.0`.
    case microsoftExternalID = "microsoft_external_id"
    /// Both Facebook logins in one entry: a Limited Login JWS, or a classic access token checked by `debug_token`.
    case facebook

    /// True for the JWS ID-token kinds the core verifies locally (`facebook` is both: see the registry).
    public var isJWS: Bool {
        switch self {
        case .apple, .facebookLimited, .microsoft, .microsoftExternalID, .oidc: true
        case .github, .facebookClassic, .facebook: false
        }
    }
}

/// How the request's raw nonce relates to the token's `nonce` claim.
public enum NonceMode: String, Sendable {
    /// The claim is the lowercase hex SHA-256 of the raw nonce (Firebase-style Apple and Facebook sign-in).
    case sha256
    /// The claim is the raw nonce itself (MSAL, most OIDC clients).
    case raw
}

/// Which issuers a provider accepts.
public enum IssuerRule: Sendable, Equatable {
    /// `iss` must equal one of these strings exactly. Exact, not prefix or pattern: a near-miss issuer
    /// is someone else's issuer.
    case exact([String])
    /// `iss` must equal the template with `{tenantid}` replaced by the token's own `tid` (Microsoft v2.0).
    case tenantTemplate(String)
}

/// Microsoft tenant allow-list (contract: `tenants`).
public enum TenantRule: Sendable, Equatable {
    case any
    /// Any work or school tenant: everything but the personal-account tenant.
    case organizations
    /// Personal Microsoft accounts only.
    case consumers
    /// These tenant GUIDs only (lowercase).
    case list(Set<String>)
    /// No tenant configured (built-in defaults without `TOKENGUARD_MICROSOFT_TENANTS`): every tenant is refused,
    /// with `hint` saying what to set.
    case unset(hint: String)

    /// The tenant personal Microsoft accounts sign in through.
    public static let consumersTenantID = "9188040d-6c67-4c5b-b112-36a304b66dad"

    public func allows(_ tenantID: String) -> Bool {
        switch self {
        case .any: true
        case .organizations: tenantID != Self.consumersTenantID
        case .consumers: tenantID == Self.consumersTenantID
        // A tid reaches this only as a validated lowercase ASCII GUID, so set membership is byte equality.
        case .list(let ids): GUID.isValid(tenantID) && ids.contains(tenantID)
        case .unset: false
        }
    }

    /// Parses the contract's `tenants` list: `"*"`, `"organizations"`, `"consumers"`, or tenant GUIDs.
    public static func parse(_ entries: [String]) -> TenantRule? {
        if entries == ["*"] { return .any }
        if entries == ["organizations"] { return .organizations }
        if entries == ["consumers"] { return .consumers }
        var ids: Set<String> = []
        for entry in entries {
            let lower = entry.lowercased()
            guard GUID.isValid(lower) else { return nil }
            ids.insert(lower)
        }
        return ids.isEmpty ? nil : .list(ids)
    }
}

/// Tenants named by domain (`contoso.onmicrosoft.com`) and resolved to GUIDs outside the core: the verifier asks it
/// about a token's tenant that the static rule does not allow.
public protocol TenantDirectory: Sendable {
    /// nil when the tenant is one the configured names resolve to; `keys_unavailable` while some name cannot be
    /// resolved because its authority is unreachable (the token may belong to it); `tenant_not_allowed` otherwise.
    func check(tenantID: String) -> VerificationError?
}

public enum GUID {
    /// True for a lowercase 8-4-4-4-12 hex GUID. Used before a `tid` is put into an issuer string.
    public static func isValid(_ string: String) -> Bool {
        if let valid = string.utf8.withContiguousStorageIfAvailable({ isValid(bytes: $0) }) { return valid }
        return Array(string.utf8).withUnsafeBufferPointer { isValid(bytes: $0) }
    }

    /// Every byte a lowercase hex digit or a dash, exactly four dashes, and those at 8, 13, 18 and 23: one pass with a
    /// table lookup per byte and no branch per position (a Microsoft token's `tid` is checked on every verification).
    static func isValid(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard bytes.count == 36 else { return false }
        let classes = byteClasses
        // Class 0 minus one sets the top bit, classes 1 and 2 do not: ORed over every byte, it marks any other byte.
        var outside: UInt8 = 0
        var dashes = 0
        for byte in bytes {
            let byteClass = classes[Int(byte)]
            outside |= (byteClass &- 1) & 0x80
            dashes &+= Int(byteClass >> 1)
        }
        return outside == 0 && dashes == 4 && bytes[8] == UInt8(ascii: "-") && bytes[13] == UInt8(ascii: "-")
            && bytes[18] == UInt8(ascii: "-") && bytes[23] == UInt8(ascii: "-")
    }

    /// 1 for a lowercase hex digit, 2 for a dash, 0 for any other byte. Plain memory made once, not an array (see
    /// ``Base64URL``).
    // nonisolated(unsafe): written once by the initializer (run once, thread-safely), then only read.
    nonisolated(unsafe) private static let byteClasses: UnsafePointer<UInt8> = {
        let table = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)
        table.initialize(repeating: 0, count: 256)
        for byte in "0123456789abcdef".utf8 { table[Int(byte)] = 1 }
        table[Int(UInt8(ascii: "-"))] = 2
        return UnsafePointer(table)
    }()
}

/// Everything the core needs to judge a token for one configured provider.
public struct ProviderPolicy: Sendable {
    /// The provider's key in the config (what requests name).
    public var name: String
    public var kind: ProviderKind
    public var issuers: IssuerRule
    public var audiences: [String]
    public var algorithms: Set<SignatureAlgorithm>
    public var nonceMode: NonceMode
    public var nonceRequired: Bool
    public var tenants: TenantRule?
    /// Allowed clock skew in seconds for `exp`, `nbf` and `iat` (contract default 60).
    public var leewaySeconds: Int64
    public var maxTokenBytes: Int
    /// The claim that becomes `user_id`: `sub`, or `oid` for Microsoft.
    public var userIDClaim: String
    /// Refuse tokens with a `nonce` in the JWS header (Microsoft Graph access tokens).
    public var rejectsHeaderNonce: Bool
    /// Accepted JOSE `typ` values, lowercase; "" stands for a token without `typ` (config `token_types`).
    public var tokenTypes: [String] = ProviderPolicy.defaultTokenTypes
    /// Accepted `azp` values when a token carries one (config `authorized_parties`); nil means the audiences.
    public var authorizedParties: [String]? = nil
    /// Tenants configured by domain name, resolved by the service (Microsoft `tenants` entries that are not GUIDs).
    public var tenantDirectory: (any TenantDirectory)? = nil
    /// Microsoft v2.0 tokens (issuer from `issuers`' template) are accepted (config `token_versions` has 2).
    public var acceptsV2Tokens = true
    /// Microsoft v1.0 tokens are accepted with this issuer template (config `token_versions` has 1); their keys'
    /// `issuer` property (a v2 template) is not compared.
    public var v1IssuerTemplate: String? = nil

    public static let microsoftV1IssuerTemplate = "https://sts.windows.net/{tenantid}/"
    public static let microsoftAuthority = "https://login.microsoftonline.com"

    /// No `typ` (Apple and Facebook send none), `JWT`, or `application/jwt` (RFC 7519 §5.1, RFC 8725 §3.11).
    public static let defaultTokenTypes = ["", "jwt", "application/jwt"]

    public static let defaultLeewaySeconds: Int64 = 60
    public static let defaultMaxTokenBytes = 16_384
    public static let appleIssuer = "https://appleid.apple.com"
    public static let facebookIssuers = ["https://www.facebook.com", "https://limited.facebook.com"]
    public static let microsoftIssuerTemplate = "https://login.microsoftonline.com/{tenantid}/v2.0"

    public init(
        name: String, kind: ProviderKind, issuers: IssuerRule, audiences: [String], algorithms: Set<SignatureAlgorithm>,
        nonceMode: NonceMode, nonceRequired: Bool, tenants: TenantRule? = nil,
        leewaySeconds: Int64 = ProviderPolicy.defaultLeewaySeconds, maxTokenBytes: Int = ProviderPolicy.defaultMaxTokenBytes,
        userIDClaim: String = "sub", rejectsHeaderNonce: Bool = false
    ) {
        self.name = name
        self.kind = kind
        self.issuers = issuers
        self.audiences = audiences
        self.algorithms = algorithms
        self.nonceMode = nonceMode
        self.nonceRequired = nonceRequired
        self.tenants = tenants
        self.leewaySeconds = leewaySeconds
        self.maxTokenBytes = maxTokenBytes
        self.userIDClaim = userIDClaim
        self.rejectsHeaderNonce = rejectsHeaderNonce
    }

    /// Sign in with Apple: RS256 only, exact issuer, SHA-256 nonce required.
    public static func apple(name: String = "apple", audiences: [String]) -> ProviderPolicy {
        ProviderPolicy(
            name: name, kind: .apple, issuers: .exact([appleIssuer]), audiences: audiences, algorithms: [.rs256],
            nonceMode: .sha256, nonceRequired: true)
    }

    /// Facebook Limited Login: RS256, both Facebook issuers, SHA-256 nonce required.
    public static func facebookLimited(name: String = "facebook_limited", audiences: [String]) -> ProviderPolicy {
        ProviderPolicy(
            name: name, kind: .facebookLimited, issuers: .exact(facebookIssuers), audiences: audiences, algorithms: [.rs256],
            nonceMode: .sha256, nonceRequired: true)
    }

    /// Microsoft identity platform v2.0: RS256, issuer from the token's `tid`, tenant allow-list, raw nonce, `oid` as user id.
    public static func microsoft(name: String = "microsoft", audiences: [String], tenants: TenantRule) -> ProviderPolicy {
        ProviderPolicy(
            name: name, kind: .microsoft, issuers: .tenantTemplate(microsoftIssuerTemplate), audiences: audiences,
            algorithms: [.rs256], nonceMode: .raw, nonceRequired: false, tenants: tenants, userIDClaim: "oid",
            rejectsHeaderNonce: true)
    }

    /// Entra External ID (CIAM): Microsoft's rules, with the one tenant's ciamlogin.com issuer.
    public static func microsoftExternalID(name: String, tenantID: String, audiences: [String]) -> ProviderPolicy {
        var policy = ProviderPolicy(
            name: name, kind: .microsoftExternalID, issuers: .tenantTemplate("https://{tenantid}.ciamlogin.com/{tenantid}/v2.0"),
            audiences: audiences, algorithms: [.rs256], nonceMode: .raw, nonceRequired: false, tenants: .list([tenantID]), userIDClaim: "oid",
            rejectsHeaderNonce: true)
        policy.acceptsV2Tokens = true
        return policy
    }

    /// Any OpenID Connect issuer: every asymmetric algorithm by default, raw nonce, optional.
    public static func oidc(
        name: String, issuer: String, audiences: [String], algorithms: Set<SignatureAlgorithm> = Set(SignatureAlgorithm.allCases)
    ) -> ProviderPolicy {
        ProviderPolicy(
            name: name, kind: .oidc, issuers: .exact([issuer]), audiences: audiences, algorithms: algorithms,
            nonceMode: .raw, nonceRequired: false)
    }
}
