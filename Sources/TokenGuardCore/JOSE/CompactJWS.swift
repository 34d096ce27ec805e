/// A compact JWS split into its three segments, each strictly decoded, with the signing input kept as bytes.
///
/// Parsing checks structure only; nothing here trusts the content. The size limit is applied before any
/// other work so that an oversized token costs one comparison. The three segments are decoded in one pass into one
/// buffer; `payload` and `signature` are slices of it.
public struct CompactJWS: Sendable {
    /// The ASCII bytes `BASE64URL(header) || '.' || BASE64URL(payload)`, exactly as received.
    public let signingInput: ArraySlice<UInt8>
    public let header: JOSEHeader
    public let payload: ArraySlice<UInt8>
    public let signature: ArraySlice<UInt8>

    /// Parses `token`, refusing anything but three canonical base64url segments with a JSON-object header.
    public static func parse(_ token: [UInt8], maxBytes: Int) throws(VerificationError) -> CompactJWS {
        guard token.count <= maxBytes else {
            throw VerificationError(.tokenTooLarge, "token is \(token.count) bytes; the limit is \(maxBytes)")
        }
        guard !token.isEmpty else { throw VerificationError(.malformedToken, "token is empty") }
        let (firstDot, secondDot, more) = token.withUnsafeBufferPointer { bytes in
            let first = Self.dot(in: bytes, from: 0)
            let second = first.map { Self.dot(in: bytes, from: $0 + 1) } ?? nil
            let third = second.map { Self.dot(in: bytes, from: $0 + 1) } ?? nil
            return (first ?? -1, second ?? -1, third != nil)
        }
        if more { throw VerificationError(.malformedToken, "a compact JWS has exactly three segments; found more") }
        guard secondDot >= 0 else {
            throw VerificationError(.malformedToken, "a compact JWS has exactly three segments; found \(firstDot < 0 ? 1 : 2)")
        }
        guard firstDot > 0 else { throw VerificationError(.malformedToken, "the header segment is empty") }
        // An empty signature segment is left to the algorithm check (alg none → unsupported_algorithm) and then to
        // the signature check (invalid_signature), which give the clearer answer.
        let segments = [0..<firstDot, (firstDot + 1)..<secondDot, (secondDot + 1)..<token.count]
        let names = ["header", "payload", "signature"]
        // Segments are judged in order, as one by one: the first that has an impossible length or a byte outside the
        // alphabet is the one named.
        var sizes = [0, 0, 0]
        var badLength = 3
        for index in 0..<3 {
            guard let size = Base64URL.decodedCount(segments[index].count) else {
                badLength = index
                break
            }
            sizes[index] = size
        }
        var refused = badLength < 3 ? badLength : -1
        let decoded = [UInt8](unsafeUninitializedCapacity: sizes[0] + sizes[1] + sizes[2]) { out, initialized in
            token.withUnsafeBufferPointer { bytes in
                var offset = 0
                for index in 0..<badLength {
                    let input = UnsafeBufferPointer(rebasing: bytes[segments[index]])
                    let output = UnsafeMutableBufferPointer(rebasing: out[offset..<(offset + sizes[index])])
                    if !Base64URL.decode(input, into: output) {
                        refused = index
                        break
                    }
                    offset += sizes[index]
                }
            }
            // Every byte is written when all three decode; a refused buffer is zeroed, then dropped unread.
            if refused >= 0 { out.initialize(repeating: 0) }
            initialized = out.count
        }
        if refused >= 0 { throw VerificationError(.malformedToken, "the \(names[refused]) is not canonical unpadded base64url") }
        let header = try JOSEHeader.parse(decoded[0..<sizes[0]])
        return CompactJWS(
            signingInput: token[..<secondDot], header: header, payload: decoded[sizes[0]..<(sizes[0] + sizes[1])],
            signature: decoded[(sizes[0] + sizes[1])...])
    }

    /// The index of the first `.` at or after `start`, eight bytes at a time (tokens are about a kilobyte).
    static func dot(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let raw = UnsafeRawBufferPointer(bytes)
        var offset = start
        // A byte of `word ^ dots` is zero exactly where `word` has a dot; the classic zero-byte test finds one.
        let dots: UInt64 = 0x2E2E_2E2E_2E2E_2E2E
        while offset + 8 <= raw.count {
            let word = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self) ^ dots
            if (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080 != 0 { break }
            offset += 8
        }
        while offset < raw.count {
            if raw[offset] == UInt8(ascii: ".") { return offset }
            offset += 1
        }
        return nil
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

    static func parse(_ bytes: ArraySlice<UInt8>) throws(VerificationError) -> JOSEHeader {
        let object: IndexedJSONObject
        do {
            object = try IndexedJSONObject(bytes)
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
        var references: [String] = []
        // A literal array of literals is static, immortal storage: no reference count shared between threads.
        for name in ["jwk", "jku", "x5u", "x5c"] where object.contains(name) { references.append(name) }
        return JOSEHeader(
            algorithm: algorithm, keyID: keyID, type: type, hasNonce: object.contains("nonce"), ignoredKeyReferences: references)
    }
}
