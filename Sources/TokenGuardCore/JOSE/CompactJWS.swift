/// A compact JWS split into its three segments, each strictly decoded, with the signing input kept as bytes.
///
/// Parsing checks structure only; nothing here trusts the content. The size limit is applied before any
/// other work so that an oversized token costs one comparison. The three segments are decoded in one pass into one
/// buffer; `payload` and `signature` are slices of it.
public struct CompactJWS: Sendable {
    /// The ASCII bytes `BASE64URL(header) || '.' || BASE64URL(payload)`, exactly as received. Empty from a parse asked
    /// not to copy them (the verifier's own, which checks the signature over the token's bytes where they lie).
    public let signingInput: ArraySlice<UInt8>
    public let header: JOSEHeader
    public let payload: ArraySlice<UInt8>
    public let signature: ArraySlice<UInt8>
    /// The header as received (base64url), and whether it was one already known (``VerifiedHeaders``).
    public var encodedHeader: ArraySlice<UInt8> { signingInput.prefix(headerSegmentCount) }
    let headerSegmentCount: Int
    /// How many of the token's first bytes are the signing input (the index of its second dot).
    let signingInputCount: Int
    let headerWasKnown: Bool

    /// Parses `token`, refusing anything but three canonical base64url segments with a JSON-object header.
    ///
    /// - Parameter knownHeaders: headers of tokens that verified; a header with exactly the bytes of one of them is
    ///   taken from there instead of being decoded and parsed again (the same header either way).
    public static func parse(_ token: [UInt8], maxBytes: Int, knownHeaders: VerifiedHeaders? = nil) throws(VerificationError) -> CompactJWS {
        guard token.count <= maxBytes else {
            throw VerificationError(.tokenTooLarge, "token is \(token.count) bytes; the limit is \(maxBytes)")
        }
        return try token.withUnsafeBufferPointer { (bytes) throws(VerificationError) -> CompactJWS in
            var inAlphabet = 0
            var outsideAlphabet = false
            if let jws = try parseCommonCase(bytes, knownHeaders: knownHeaders, inAlphabet: &inAlphabet, outsideAlphabet: &outsideAlphabet) {
                return jws
            }
            return try parseExactly(bytes)
        }
    }

    /// The parse of a well-formed token, or nil when ``parseExactly(_:)`` must decide (and word the refusal). Throws
    /// only what the exact parse would throw for the same token (a header that is not a JSON object as required).
    ///
    /// The first dot from the start and the last from the end: when all three segments then decode, the payload
    /// between them holds no dot (a dot is outside the alphabet), so the token has exactly three segments and the
    /// signature is never scanned twice. Decoding admits only the alphabet, so such a token passes the alphabet check.
    ///
    /// The signature is decoded before the payload: a token refused for its last bytes (a truncated or altered
    /// signature) is then refused without decoding the kilobyte before them. The order changes no answer: on nil the
    /// caller decides with the exact parse, which meets the segments in the reader's order.
    ///
    /// - Parameters:
    ///   - inAlphabet: on nil, how many leading bytes are known to be in the compact JWS alphabet (the header when it
    ///     decoded, and its dot), so that a caller looking for a byte outside it can start there.
    ///   - outsideAlphabet: on nil, true when the header or the signature holds a byte outside the base64url alphabet.
    ///     Neither segment can hold a dot, so that byte is outside the compact JWS alphabet too.
    ///   - dots: the token's ``outerDots(in:)`` when the caller found them already (nil: found here).
    ///   - copiesSigningInput: false leaves ``signingInput`` empty, for a caller that checks the signature over `token`.
    static func parseCommonCase(
        _ token: UnsafeBufferPointer<UInt8>, knownHeaders: VerifiedHeaders?, inAlphabet: inout Int, outsideAlphabet: inout Bool,
        dots: (first: Int, last: Int)?? = nil, copiesSigningInput: Bool = true
    ) throws(VerificationError) -> CompactJWS? {
        inAlphabet = 0
        outsideAlphabet = false
        let outer = dots ?? Self.outerDots(in: token)
        guard let (first, last) = outer, first > 0, last > first else { return nil }
        let header = knownHeaders.flatMap { known in known.header(encoded: UnsafeBufferPointer(rebasing: token[..<first])) }
        let (decoded, refused, cause) = decode(token, firstDot: first, secondDot: last, withoutHeader: header != nil, signatureFirst: true)
        guard let decoded else {
            // The header decoded (or was known) unless it was the one refused: it and its dot are in the alphabet. A
            // signature of impossible length is refused after the payload decoded (a length stops the decoding in the
            // reader's order), so the payload and its dot are too.
            inAlphabet = refused == 0 ? 0 : refused == 2 && cause == nil ? last + 1 : first + 1
            outsideAlphabet = refused != 1 && cause == .outsideAlphabet
            return nil
        }
        if let header {
            return assemble(token, firstDot: first, secondDot: last, decoded, knownHeader: header, copiesSigningInput: copiesSigningInput)
        }
        return try assemble(token, firstDot: first, secondDot: last, decoded, copiesSigningInput: copiesSigningInput)
    }

    /// The first dot from the start and the last from the end, nil when there is none (the same dot when there is one).
    static func outerDots(in bytes: UnsafeBufferPointer<UInt8>) -> (first: Int, last: Int)? {
        guard let first = dot(in: bytes, from: 0), let last = lastDot(in: bytes) else { return nil }
        return (first, last)
    }

    /// What ``parseExactly(_:)`` answers for a token of `byteCount` bytes with one dot or none, once it is known to be
    /// in the alphabet: no other check comes before these.
    static func fewerThanThreeSegments(byteCount: Int, hasDot: Bool) -> VerificationError {
        // Literal messages, not interpolated ones: a refusal of junk should cost less than a verification.
        if byteCount == 0 { return VerificationError(.malformedToken, "token is empty") }
        return VerificationError(
            .malformedToken, hasDot ? "a compact JWS has exactly three segments; found 2" : "a compact JWS has exactly three segments; found 1")
    }

    /// The refusals in the order a reader meets them: the segment count, an empty header, then each segment in turn.
    static func parseExactly(_ token: [UInt8]) throws(VerificationError) -> CompactJWS {
        try token.withUnsafeBufferPointer { (bytes) throws(VerificationError) -> CompactJWS in try parseExactly(bytes) }
    }

    /// The same over the token's bytes where they lie.
    static func parseExactly(_ token: UnsafeBufferPointer<UInt8>) throws(VerificationError) -> CompactJWS {
        guard !token.isEmpty else { throw VerificationError(.malformedToken, "token is empty") }
        let first = Self.dot(in: token, from: 0)
        let second = first.map { Self.dot(in: token, from: $0 + 1) } ?? nil
        let more = (second.map { Self.dot(in: token, from: $0 + 1) } ?? nil) != nil
        let (firstDot, secondDot) = (first ?? -1, second ?? -1)
        if more { throw VerificationError(.malformedToken, "a compact JWS has exactly three segments; found more") }
        guard secondDot >= 0 else { throw fewerThanThreeSegments(byteCount: token.count, hasDot: firstDot >= 0) }
        guard firstDot > 0 else { throw VerificationError(.malformedToken, "the header segment is empty") }
        // An empty signature segment is left to the algorithm check (alg none → unsupported_algorithm) and then to
        // the signature check (invalid_signature), which give the clearer answer.
        let (decoded, refused, _) = decode(token, firstDot: firstDot, secondDot: secondDot)
        guard let decoded else {
            switch refused {
            case 0: throw VerificationError(.malformedToken, "the header is not canonical unpadded base64url")
            case 1: throw VerificationError(.malformedToken, "the payload is not canonical unpadded base64url")
            default: throw VerificationError(.malformedToken, "the signature is not canonical unpadded base64url")
            }
        }
        return try assemble(token, firstDot: firstDot, secondDot: secondDot, decoded)
    }

    /// The three segments decoded into one buffer, with each one's size; or nil, the index of the first segment
    /// (in order, as one by one) that has an impossible length or a byte outside the alphabet, and why it was refused
    /// (nil for an impossible length). `withoutHeader`: the header segment is left out (taken as empty), its header
    /// being known already. `signatureFirst`: the segments are decoded header, signature, payload (the index is then
    /// the first refused in that order); a length is still judged in the reader's order, before any decoding.
    ///
    /// The segments' ranges and sizes are tuples, not arrays: this runs for every token, and an array would be two
    /// heap allocations per token for three numbers each.
    private static func decode(
        _ token: UnsafeBufferPointer<UInt8>, firstDot: Int, secondDot: Int, withoutHeader: Bool = false, signatureFirst: Bool = false
    ) -> (decoded: (bytes: [UInt8], headerCount: Int, payloadCount: Int)?, refused: Int, cause: Base64URL.Refusal?) {
        let segments = (withoutHeader ? 0..<0 : 0..<firstDot, (firstDot + 1)..<secondDot, (secondDot + 1)..<token.count)
        @inline(__always) func segment(_ index: Int) -> Range<Int> {
            index == 0 ? segments.0 : index == 1 ? segments.1 : segments.2
        }
        // The first segment with an impossible length stops the decoding there (3: none has one).
        guard let headerSize = Base64URL.decodedCount(segments.0.count) else { return (nil, 0, nil) }
        let payloadSize = Base64URL.decodedCount(segments.1.count)
        let signatureSize = payloadSize == nil ? nil : Base64URL.decodedCount(segments.2.count)
        let sizes = (headerSize, payloadSize ?? 0, signatureSize ?? 0)
        let badLength = payloadSize == nil ? 1 : signatureSize == nil ? 2 : 3
        @inline(__always) func size(_ index: Int) -> Int { index == 0 ? sizes.0 : index == 1 ? sizes.1 : sizes.2 }
        var refused = badLength < 3 ? badLength : -1
        var cause: Base64URL.Refusal? = nil
        // Nothing to decode: an empty array as it is. Made with `unsafeUninitializedCapacity: 0`, it would set the
        // count of the one empty-array storage every thread shares (a write ThreadSanitizer reports as a race).
        if sizes.0 + sizes.1 + sizes.2 == 0 { return refused >= 0 ? (nil, refused, nil) : (([], 0, 0), -1, nil) }
        let tables = Base64URL.tables
        let decoded = [UInt8](unsafeUninitializedCapacity: sizes.0 + sizes.1 + sizes.2) { out, initialized in
            // Where each segment's bytes go in `out`: header, payload, signature, whatever the order of decoding.
            let offsets = (0, sizes.0, sizes.0 + sizes.1)
            for step in 0..<badLength {
                let index = signatureFirst && badLength == 3 ? (step == 0 ? 0 : step == 1 ? 2 : 1) : step
                let offset = index == 0 ? offsets.0 : index == 1 ? offsets.1 : offsets.2
                let input = UnsafeBufferPointer(rebasing: token[segment(index)])
                let output = UnsafeMutableBufferPointer(rebasing: out[offset..<(offset + size(index))])
                if let refusal = Base64URL.decode(input, into: output, tables: tables) {
                    refused = index
                    cause = refusal
                    break
                }
            }
            // Every byte is written when all three decode; a refused array is left empty (bytes need no
            // deinitialisation) and dropped.
            initialized = refused < 0 ? out.count : 0
        }
        return refused >= 0 ? (nil, refused, cause) : ((decoded, sizes.0, sizes.1), -1, nil)
    }

    private static func assemble(
        _ token: UnsafeBufferPointer<UInt8>, firstDot: Int, secondDot: Int, _ decoded: (bytes: [UInt8], headerCount: Int, payloadCount: Int),
        copiesSigningInput: Bool = true
    ) throws(VerificationError) -> CompactJWS {
        let header = try JOSEHeader.parse(decoded.bytes[0..<decoded.headerCount])
        return assemble(
            token, firstDot: firstDot, secondDot: secondDot, decoded, knownHeader: header, wasKnown: false, copiesSigningInput: copiesSigningInput)
    }

    /// The signing input is copied out of `token` here, once the segments decoded, into an array of its own: the
    /// verdict keeps the decoded segments (its claims), not another copy of the token.
    private static func assemble(
        _ token: UnsafeBufferPointer<UInt8>, firstDot: Int, secondDot: Int, _ decoded: (bytes: [UInt8], headerCount: Int, payloadCount: Int),
        knownHeader header: JOSEHeader, wasKnown: Bool = true, copiesSigningInput: Bool = true
    ) -> CompactJWS {
        let (bytes, headerCount, payloadCount) = decoded
        return CompactJWS(
            signingInput: copiesSigningInput ? Array(UnsafeBufferPointer(rebasing: token[..<secondDot]))[...] : [],
            header: header, payload: bytes[headerCount..<(headerCount + payloadCount)], signature: bytes[(headerCount + payloadCount)...],
            headerSegmentCount: firstDot, signingInputCount: secondDot, headerWasKnown: wasKnown)
    }

    /// The index of the last `.`, sixteen bytes at a time from the end (the signature it skips is 86 to 700 bytes).
    static func lastDot(in bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        let raw = UnsafeRawBufferPointer(bytes)
        var end = raw.count
        while end >= 16 {
            let high = raw.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self)
            let low = raw.loadUnaligned(fromByteOffset: end - 16, as: UInt64.self)
            if dotFlags(high) | dotFlags(low) != 0 { break }
            end -= 16
        }
        while end > 0 {
            end -= 1
            if raw[end] == UInt8(ascii: ".") { return end }
        }
        return nil
    }

    /// Non-zero when a byte of `word` is a dot: a byte of `word ^ dots` is zero exactly where `word` has one, and the
    /// classic zero-byte test flags it (exact as to whether there is one; the byte loop after it finds which).
    @inline(__always)
    static func dotFlags(_ word: UInt64) -> UInt64 {
        let flipped = word ^ 0x2E2E_2E2E_2E2E_2E2E
        return (flipped &- 0x0101_0101_0101_0101) & ~flipped & 0x8080_8080_8080_8080
    }

    /// The index of the first `.` at or after `start`, sixteen bytes at a time (tokens are about a kilobyte).
    static func dot(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let raw = UnsafeRawBufferPointer(bytes)
        var offset = start
        while offset + 16 <= raw.count {
            let low = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            let high = raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            if dotFlags(low) | dotFlags(high) != 0 { break }
            offset += 16
        }
        while offset < raw.count {
            if raw[offset] == UInt8(ascii: ".") { return offset }
            offset += 1
        }
        return nil
    }
}

/// The protected header members tokenguard reads. Everything else is ignored, never acted upon.
///
/// The members live in one shared, immutable object: a header known from an earlier token (``VerifiedHeaders``) is
/// handed to every verification from any thread, and copying one reference counts one object, not each of its strings
/// (counts that two threads verifying at once would contend for).
public struct JOSEHeader: Sendable {
    private final class Members: Sendable {
        let algorithm: String
        let keyID: String?
        let type: String?
        let hasNonce: Bool
        let ignoredKeyReferences: [String]

        init(algorithm: String, keyID: String?, type: String?, hasNonce: Bool, ignoredKeyReferences: [String]) {
            self.algorithm = algorithm
            self.keyID = keyID
            self.type = type
            self.hasNonce = hasNonce
            self.ignoredKeyReferences = ignoredKeyReferences
        }
    }

    private let members: Members
    /// The `alg` string as sent (checked against the allow-list later).
    public var algorithm: String { members.algorithm }
    public var keyID: String? { members.keyID }
    public var type: String? { members.type }
    /// True when the header carries `nonce`: Microsoft Graph access tokens do, ID tokens never.
    public var hasNonce: Bool { members.hasNonce }
    /// Header members that name keys or key locations (`jwk`, `jku`, `x5u`, `x5c`): recorded only so that
    /// `explain` can say they were ignored. They are never used to find or build a key.
    public var ignoredKeyReferences: [String] { members.ignoredKeyReferences }

    init(algorithm: String, keyID: String?, type: String?, hasNonce: Bool, ignoredKeyReferences: [String]) {
        members = Members(algorithm: algorithm, keyID: keyID, type: type, hasNonce: hasNonce, ignoredKeyReferences: ignoredKeyReferences)
    }

    /// Extensions tokenguard understands when listed in `crit`. None: any `crit` entry is refused.
    public static let understoodCriticalExtensions: Set<String> = []

    static func parse(_ bytes: ArraySlice<UInt8>) throws(VerificationError) -> JOSEHeader {
        let object: IndexedJSONObject
        do {
            object = try IndexedJSONObject(bytes)
        } catch {
            throw VerificationError(.malformedToken, "the header is not a valid JSON object: \(error)")
        }
        // One visit per member (names are unique: the index refuses duplicates), then the checks in a fixed order.
        var (alg, kid, typ, crit): (JSONValue?, JSONValue?, JSONValue?, JSONValue?) = (nil, nil, nil, nil)
        var hasNonce = false
        var keyReferences = (jwk: false, jku: false, x5u: false, x5c: false)
        object.forEachMember { name, member in
            if IndexedJSONObject.name(name, is: "alg") {
                alg = object.value(of: member)
            } else if IndexedJSONObject.name(name, is: "kid") {
                kid = object.value(of: member)
            } else if IndexedJSONObject.name(name, is: "typ") {
                typ = object.value(of: member)
            } else if IndexedJSONObject.name(name, is: "crit") {
                crit = object.value(of: member)
            } else if IndexedJSONObject.name(name, is: "nonce") {
                hasNonce = true
            } else if IndexedJSONObject.name(name, is: "jwk") {
                keyReferences.jwk = true
            } else if IndexedJSONObject.name(name, is: "jku") {
                keyReferences.jku = true
            } else if IndexedJSONObject.name(name, is: "x5u") {
                keyReferences.x5u = true
            } else if IndexedJSONObject.name(name, is: "x5c") {
                keyReferences.x5c = true
            }
        }
        guard let algValue = alg else { throw VerificationError(.malformedToken, "the header has no alg") }
        guard let algorithm = algValue.stringValue else { throw VerificationError(.malformedToken, "the header alg is not a string") }
        var keyID: String? = nil
        if let kidValue = kid {
            guard let kid = kidValue.stringValue else { throw VerificationError(.malformedToken, "the header kid is not a string") }
            keyID = kid
        }
        var type: String? = nil
        if let typValue = typ {
            guard let typ = typValue.stringValue else { throw VerificationError(.malformedToken, "the header typ is not a string") }
            type = typ
        }
        if let critValue = crit {
            // RFC 7515 §4.1.11: a non-empty array of names that must be understood, none of them a registered header.
            guard let crit = critValue.arrayValue, !crit.isEmpty else {
                throw VerificationError(.malformedToken, "the header crit must be a non-empty array")
            }
            for entry in crit {
                guard let name = entry.stringValue else { throw VerificationError(.malformedToken, "the header crit lists a non-string") }
                guard understoodCriticalExtensions.contains(name) else {
                    throw VerificationError(
                        .malformedToken, "the header marks \"\(name.excerpt(bytes: 32))\" critical; tokenguard does not understand it")
                }
            }
        }
        var references: [String] = []
        if keyReferences.jwk { references.append("jwk") }
        if keyReferences.jku { references.append("jku") }
        if keyReferences.x5u { references.append("x5u") }
        if keyReferences.x5c { references.append("x5c") }
        return JOSEHeader(algorithm: algorithm, keyID: keyID, type: type, hasNonce: hasNonce, ignoredKeyReferences: references)
    }
}
