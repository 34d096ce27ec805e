/// A compact JWS split into its three segments, each strictly decoded, with the signing input kept as bytes.
///
/// Parsing checks structure only; nothing here trusts the content. The size limit is applied before any
/// other work so that an oversized token costs one comparison.
public struct CompactJWS: Sendable {
    /// The ASCII bytes `BASE64URL(header) || '.' || BASE64URL(payload)`, exactly as received.
    public let signingInput: ArraySlice<UInt8>
    public let header: JOSEHeader
    public let payload: [UInt8]
    public let signature: [UInt8]

    /// Parses `token`, refusing anything but three canonical base64url segments with a JSON-object header.
    public static func parse(_ token: [UInt8], maxBytes: Int) throws(VerificationError) -> CompactJWS {
        guard token.count <= maxBytes else {
            throw VerificationError(.tokenTooLarge, "token is \(token.count) bytes; the limit is \(maxBytes)")
        }
        guard !token.isEmpty else { throw VerificationError(.malformedToken, "token is empty") }
        var firstDot = -1
        var secondDot = -1
        for index in token.indices where token[index] == UInt8(ascii: ".") {
            if firstDot < 0 {
                firstDot = index
            } else if secondDot < 0 {
                secondDot = index
            } else {
                throw VerificationError(.malformedToken, "a compact JWS has exactly three segments; found more")
            }
        }
        guard secondDot >= 0 else {
            throw VerificationError(.malformedToken, "a compact JWS has exactly three segments; found \(firstDot < 0 ? 1 : 2)")
        }
        guard firstDot > 0 else { throw VerificationError(.malformedToken, "the header segment is empty") }
        // An empty signature segment is left to the algorithm check (alg none → unsupported_algorithm) and then to
        // the signature check (invalid_signature), which give the clearer answer.
        guard let headerBytes = Base64URL.decode(token[..<firstDot]) else {
            throw VerificationError(.malformedToken, "the header is not canonical unpadded base64url")
        }
        guard let payload = Base64URL.decode(token[(firstDot + 1)..<secondDot]) else {
            throw VerificationError(.malformedToken, "the payload is not canonical unpadded base64url")
        }
        guard let signature = Base64URL.decode(token[(secondDot + 1)...]) else {
            throw VerificationError(.malformedToken, "the signature is not canonical unpadded base64url")
        }
        let header = try JOSEHeader.parse(headerBytes)
        return CompactJWS(signingInput: token[..<secondDot], header: header, payload: payload, signature: signature)
    }
}

/// The protected header members tokenguard reads. Everything else is ignored, never acted upon.
public struct JOSEHeader: Sendable {
    /// The `alg` string as sent (checked against the allow-list later).
    public let algorithm: String
    public let keyID: String?
    public let type: String?
    /// True when the header carries `nonce`: Microsoft Graph access tokens do, ID tokens never.
    public let hasNonce: Bool
    /// Header members that name keys or key locations (`jwk`, `jku`, `x5u`, `x5c`): recorded only so that
    /// `explain` can say they were ignored. They are never used to find or build a key.
    public let ignoredKeyReferences: [String]

    /// Extensions tokenguard understands when listed in `crit`. None: any `crit` entry is refused.
    public static let understoodCriticalExtensions: Set<String> = []

    static func parse(_ bytes: [UInt8]) throws(VerificationError) -> JOSEHeader {
        let object: JSONObject
        do {
            object = try JSONParser.parseObject(bytes)
        } catch {
            throw VerificationError(.malformedToken, "the header is not a valid JSON object: \(error)")
        }
        guard let algValue = object["alg"] else { throw VerificationError(.malformedToken, "the header has no alg") }
        guard let algorithm = algValue.stringValue else { throw VerificationError(.malformedToken, "the header alg is not a string") }
        var keyID: String? = nil
        if let kidValue = object["kid"] {
            guard let kid = kidValue.stringValue else { throw VerificationError(.malformedToken, "the header kid is not a string") }
            keyID = kid
        }
        var type: String? = nil
        if let typValue = object["typ"] {
            guard let typ = typValue.stringValue else { throw VerificationError(.malformedToken, "the header typ is not a string") }
            type = typ
        }
        if let critValue = object["crit"] {
            // RFC 7515 §4.1.11: a non-empty array of names that must be understood, none of them a registered header.
            guard let crit = critValue.arrayValue, !crit.isEmpty else {
                throw VerificationError(.malformedToken, "the header crit must be a non-empty array")
            }
            for entry in crit {
                guard let name = entry.stringValue else { throw VerificationError(.malformedToken, "the header crit lists a non-string") }
                guard understoodCriticalExtensions.contains(name) else {
                    throw VerificationError(.malformedToken, "the header marks \"\(name.prefix(32))\" critical; tokenguard does not understand it")
                }
            }
        }
        let references = ["jwk", "jku", "x5u", "x5c"].filter { object[$0] != nil }
        return JOSEHeader(
            algorithm: algorithm, keyID: keyID, type: type, hasNonce: object["nonce"] != nil, ignoredKeyReferences: references)
    }
}
