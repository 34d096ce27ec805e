import TokenGuardCrypto

/// One public key from a JWKS, parsed once into an OpenSSL key, with the JWK members that constrain its use.
///
/// A class: a verification hands its key along (to the verdict, the cache), and a reference is one count to keep
/// rather than one per member.
public final class VerificationKey: Sendable {
    public let keyID: String?
    public let publicKey: PublicKey
    /// The JWK's own `alg`, when it names one: tokens must then use exactly that algorithm.
    public let algorithm: SignatureAlgorithm?
    /// Microsoft's per-key `issuer` (may contain the `{tenantid}` template).
    public let issuer: String?
    /// `issuer` split around its placeholders once, for the per-token comparison.
    let issuerTemplate: TenantIssuerTemplate?
    /// RFC 7638 thumbprint (base64url SHA-256 of the canonical JWK), identifying the key material.
    public let thumbprint: String
    /// The JWK as published, for the key archive and the `keys` listing.
    public let jwk: JSONObject
    /// For a key taken from the archive after it left the JWKS: the `iat` range of tokens it may verify
    /// (one day before it was first seen, through when it was last seen). nil for currently published keys.
    public let publishedWindow: ClosedRange<Int64>?
    /// What a cached verdict depends on: the key material and every published member that decides what the key may
    /// verify (`kid`, `alg`, Microsoft's `issuer`). A verdict cached under it dies when any of them changes. Bytes:
    /// as Strings, a kid re-published in a canonically equivalent but other spelling would compare equal.
    public let binding: ByteKey

    public init(
        keyID: String?, publicKey: PublicKey, algorithm: SignatureAlgorithm?, issuer: String?, thumbprint: String, jwk: JSONObject,
        publishedWindow: ClosedRange<Int64>? = nil
    ) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.algorithm = algorithm
        self.issuer = issuer
        issuerTemplate = issuer.map(TenantIssuerTemplate.init)
        self.thumbprint = thumbprint
        self.jwk = jwk
        self.publishedWindow = publishedWindow
        // An absent member is "-", a present one its length and bytes: no kid and an empty kid are other keys (a token
        // with `"kid": ""` finds only the second), as are no `issuer` and an empty one (Microsoft refuses the second).
        func member(_ value: String?) -> String { value.map { "\($0.utf8.count):\($0)" } ?? "-" }
        binding = ByteKey("\(thumbprint)|\(member(keyID))|\(algorithm?.rawValue ?? "-")|\(member(issuer))")
    }

    package func withPublishedWindow(_ window: ClosedRange<Int64>) -> VerificationKey {
        VerificationKey(
            keyID: keyID, publicKey: publicKey, algorithm: algorithm, issuer: issuer, thumbprint: thumbprint, jwk: jwk, publishedWindow: window)
    }

    /// True when a token signed with `alg` may be checked with this key.
    public func permits(_ alg: SignatureAlgorithm) -> Bool {
        alg.keyType == publicKey.keyType && (algorithm == nil || algorithm == alg)
    }
}
