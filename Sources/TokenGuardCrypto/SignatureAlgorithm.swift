/// The asymmetric JWS algorithms tokenguard verifies (RFC 7518 §3, RFC 8037).
///
/// There is deliberately no case for `none` or any HMAC algorithm: a verifier that only ever holds public
/// keys must never accept a MAC, since a MAC keyed with a public key can be forged by anyone.
public enum SignatureAlgorithm: String, Sendable, CaseIterable, Hashable {
    case rs256 = "RS256"
    case rs384 = "RS384"
    case rs512 = "RS512"
    case ps256 = "PS256"
    case ps384 = "PS384"
    case ps512 = "PS512"
    case es256 = "ES256"
    case es384 = "ES384"
    case es512 = "ES512"
    case edDSA = "EdDSA"

    /// The key type an algorithm is bound to. A token whose `alg` does not fit its key's type is refused.
    public var keyType: PublicKey.KeyType {
        switch self {
        case .rs256, .rs384, .rs512, .ps256, .ps384, .ps512: .rsa
        case .es256: .ec(.p256)
        case .es384: .ec(.p384)
        case .es512: .ec(.p521)
        case .edDSA: .ed25519
        }
    }

    /// A small index per case (its position in `allCases`), for tables kept per algorithm.
    var ordinal: Int {
        switch self {
        case .rs256: 0
        case .rs384: 1
        case .rs512: 2
        case .ps256: 3
        case .ps384: 4
        case .ps512: 5
        case .es256: 6
        case .es384: 7
        case .es512: 8
        case .edDSA: 9
        }
    }

    var digest: DigestAlgorithm? {
        switch self {
        case .rs256, .ps256, .es256: .sha256
        case .rs384, .ps384, .es384: .sha384
        case .rs512, .ps512, .es512: .sha512
        case .edDSA: nil
        }
    }

    var usesPSS: Bool {
        switch self {
        case .ps256, .ps384, .ps512: true
        default: false
        }
    }
}

/// The elliptic curves JWS ECDSA uses, each with its fixed coordinate length.
public enum EllipticCurve: String, Sendable, Hashable {
    case p256 = "P-256"
    case p384 = "P-384"
    case p521 = "P-521"

    /// Bytes of one coordinate, and of each of `r` and `s` in a JWS signature (RFC 7518 §3.4).
    public var coordinateByteCount: Int {
        switch self {
        case .p256: 32
        case .p384: 48
        case .p521: 66
        }
    }

    var openSSLGroupName: String {
        switch self {
        case .p256: "prime256v1"
        case .p384: "secp384r1"
        case .p521: "secp521r1"
        }
    }
}
