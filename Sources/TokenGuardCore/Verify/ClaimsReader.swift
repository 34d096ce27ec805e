/// Typed reads of payload claims, each failing with a coded error instead of trapping or coercing.
struct ClaimsReader {
    let claims: IndexedJSONObject

    /// Latest NumericDate accepted: 9999-12-31T23:59:59Z. Anything later is nonsense or an overflow attempt.
    static let maximumNumericDate: Int64 = NumericDate.maximum

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
    func numericDate(_ name: String) throws(VerificationError) -> Int64? {
        // The usual form, a plain integer, read in place; any other goes the full way below.
        if let seconds = claims.plainInteger(name), seconds >= 0, seconds <= Self.maximumNumericDate { return seconds }
        guard let value = claims[name] else { return nil }
        let seconds: Int64
        switch value {
        case .integer(let integer):
            seconds = integer
        case .number(let double):
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
        guard let value = claims["aud"] else { throw VerificationError(.invalidAudience, "claim aud is missing") }
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
        switch claims["email_verified"] {
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
