/// The payload members a verification reads. A ``ClaimsReader`` finds all of them in one visit over the payload, so
/// each read is then a table lookup rather than a search by name.
enum ClaimName: Int, CaseIterable {
    case iss, aud, azp, exp, nbf, iat, sub, tid, ver, oid, nonce, email, events, xmsEdov, emailVerified, isPrivateEmail, realUserStatus

    var text: String {
        switch self {
        case .iss: "iss"
        case .aud: "aud"
        case .azp: "azp"
        case .exp: "exp"
        case .nbf: "nbf"
        case .iat: "iat"
        case .sub: "sub"
        case .tid: "tid"
        case .ver: "ver"
        case .oid: "oid"
        case .nonce: "nonce"
        case .email: "email"
        case .events: "events"
        case .xmsEdov: "xms_edov"
        case .emailVerified: "email_verified"
        case .isPrivateEmail: "is_private_email"
        case .realUserStatus: "real_user_status"
        }
    }

    /// The claim a member names, from the index's fingerprint of its (decoded) name — the length in the top byte, the
    /// first seven bytes below, little-endian — which is the whole name up to seven bytes; longer ones are compared
    /// in full. `HotPathEquivalenceTests.claimTable` checks every constant against ``text``.
    init?(fingerprint: UInt64, name: UnsafeBufferPointer<UInt8>) {
        let found: ClaimName
        switch fingerprint {
        case 0x0300_0000_0073_7369: found = .iss
        case 0x0300_0000_0064_7561: found = .aud
        case 0x0300_0000_0070_7a61: found = .azp
        case 0x0300_0000_0070_7865: found = .exp
        case 0x0300_0000_0066_626e: found = .nbf
        case 0x0300_0000_0074_6169: found = .iat
        case 0x0300_0000_0062_7573: found = .sub
        case 0x0300_0000_0064_6974: found = .tid
        case 0x0300_0000_0072_6576: found = .ver
        case 0x0300_0000_0064_696f: found = .oid
        case 0x0500_0065_636e_6f6e: found = .nonce
        case 0x0500_006c_6961_6d65: found = .email
        case 0x0600_7374_6e65_7665: found = .events
        case 0x086f_6465_5f73_6d78 where IndexedJSONObject.name(name, is: "xms_edov"): found = .xmsEdov
        case 0x0e76_5f6c_6961_6d65 where IndexedJSONObject.name(name, is: "email_verified"): found = .emailVerified
        case 0x1076_6972_705f_7369 where IndexedJSONObject.name(name, is: "is_private_email"): found = .isPrivateEmail
        case 0x1073_755f_6c61_6572 where IndexedJSONObject.name(name, is: "real_user_status"): found = .realUserStatus
        default: return nil
        }
        self = found
    }
}

/// Typed reads of payload claims, each failing with a coded error instead of trapping or coercing.
struct ClaimsReader {
    let claims: IndexedJSONObject
    /// Where each ``ClaimName`` is: its member's position, or -1 (names are unique: the index refuses duplicates).
    private let found: InlineArray<17, Int32>

    /// `claims` is consumed (kept, not copied); ``claims`` gives it back.
    init(claims: consuming IndexedJSONObject) {
        var found = InlineArray<17, Int32>(repeating: -1)
        // Positions fit: the index holds offsets in 32 bits, so it never has more members than that.
        var position: Int32 = 0
        claims.forEachMember { name, member in
            if let claim = ClaimName(fingerprint: member.fingerprint, name: name) { found[claim.rawValue] = position }
            position &+= 1
        }
        self.found = found
        self.claims = claims
    }

    private func member(_ name: ClaimName) -> IndexedJSONObject.Member? {
        let position = Int(found[name.rawValue])
        return position >= 0 ? claims.members[position] : nil
    }

    /// Latest NumericDate accepted: 9999-12-31T23:59:59Z. Anything later is nonsense or an overflow attempt.
    static let maximumNumericDate: Int64 = NumericDate.maximum

    func value(_ name: ClaimName) -> JSONValue? { member(name).flatMap { claims.value(of: $0) } }
    func contains(_ name: ClaimName) -> Bool { found[name.rawValue] >= 0 }

    /// ``IndexedJSONObject/withPlainString(_:_:)`` for a claim found in the visit.
    func withPlainString<R>(_ name: ClaimName, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        member(name).flatMap { claims.withPlainString($0, body) }
    }

    /// Whether the claim is a string without escapes whose bytes are exactly `expected`'s (read where it lies).
    func isPlainString(_ name: ClaimName, _ expected: StaticString) -> Bool {
        let expected = UnsafeBufferPointer(start: expected.utf8Start, count: expected.utf8CodeUnitCount)
        return withPlainString(name) { $0.elementsEqual(expected) } ?? false
    }

    func string(_ name: ClaimName) throws(VerificationError) -> String? {
        guard let value = value(name) else { return nil }
        guard let string = value.stringValue else { throw VerificationError(.malformedToken, "claim \(name.text) is not a string") }
        return string
    }

    func requiredString(_ name: ClaimName) throws(VerificationError) -> String {
        guard let string = try string(name) else { throw VerificationError(.malformedToken, "claim \(name.text) is missing") }
        return string
    }

    /// By any name (a provider's configured user-id claim): a search.
    func string(_ name: String) throws(VerificationError) -> String? {
        guard let value = claims[name] else { return nil }
        guard let string = value.stringValue else { throw VerificationError(.malformedToken, "claim \(name) is not a string") }
        return string
    }

    func requiredString(_ name: String) throws(VerificationError) -> String {
        guard let string = try string(name) else { throw VerificationError(.malformedToken, "claim \(name) is missing") }
        return string
    }

    /// A NumericDate (RFC 7519 §2): a JSON number of seconds. Strings are refused, fractions are floored,
    /// and values outside 0…9999-12-31 are refused before any conversion that could trap.
    func numericDate(_ claim: ClaimName) throws(VerificationError) -> Int64? {
        let name = claim.text
        guard let member = member(claim) else { return nil }
        // The usual form, a plain integer, read in place; any other goes the full way below.
        if let seconds = claims.plainInteger(member), seconds >= 0, seconds <= Self.maximumNumericDate { return seconds }
        guard let value = claims.value(of: member) else { return nil }
        let seconds: Int64
        switch value {
        case .integer(let integer):
            seconds = integer
        case .number(let double, _):
            guard double.isFinite, double >= 0, double <= Double(Self.maximumNumericDate) else {
                throw VerificationError(.malformedToken, "claim \(name) is out of range")
            }
            seconds = Int64(double.rounded(.down))
        default:
            throw VerificationError(.malformedToken, "claim \(name) is not a JSON number")
        }
        guard seconds >= 0, seconds <= Self.maximumNumericDate else {
            throw VerificationError(.malformedToken, "claim \(name) is out of range")
        }
        return seconds
    }

    /// `aud` as a list: a string, or a non-empty array of strings (RFC 7519 §4.1.3).
    func audiences() throws(VerificationError) -> [String] {
        guard let value = value(.aud) else { throw VerificationError(.invalidAudience, "claim aud is missing") }
        switch value {
        case .string(let single):
            return [single]
        case .array(let list):
            guard !list.isEmpty else { throw VerificationError(.invalidAudience, "claim aud is an empty array") }
            var result: [String] = []
            for entry in list {
                guard let string = entry.stringValue else { throw VerificationError(.malformedToken, "claim aud lists a non-string") }
                result.append(string)
            }
            return result
        default:
            throw VerificationError(.malformedToken, "claim aud is neither a string nor an array")
        }
    }

    /// `email_verified` as a boolean: JSON booleans, or Apple's pre-2024 strings `"true"`/`"false"`.
    func emailVerified() throws(VerificationError) -> Bool {
        switch value(.emailVerified) {
        case nil, .null?: return false
        case .bool(let flag)?: return flag
        case .string("true")?: return true
        case .string("false")?: return false
        default: throw VerificationError(.malformedToken, "claim email_verified is neither a boolean nor \"true\"/\"false\"")
        }
    }
}

/// The range of dates tokenguard accepts from any source (claims, archives, upstream answers).
public enum NumericDate {
    /// 9999-12-31T23:59:59Z.
    public static let maximum: Int64 = 253_402_300_799
}
