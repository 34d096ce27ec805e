import TokenGuardCrypto

/// Verifies ID tokens for one provider: structure, algorithm, key, signature, then claims and nonce.
///
/// The signature is checked before any claim is read, so a forged token is `invalid_signature` whatever
/// its claims say, and no claim of an unauthenticated payload influences the outcome. Keys come from a
/// ``KeySource`` snapshot; the synchronous path never fetches.
public final class TokenVerifier: Sendable {
    public let policy: ProviderPolicy
    public let keySource: any KeySource
    /// Recently verified tokens (nil: no cache). Never used for verification at a past time.
    public let cache: VerifiedTokenCache?
    /// The policy's Microsoft issuer template, split around its placeholders once.
    private let issuerTemplate: TenantIssuerTemplate?

    /// Longest raw nonce accepted in a request: far beyond any real one, small enough to hash cheaply.
    public static let maximumNonceBytes = 1024

    public init(policy: ProviderPolicy, keySource: any KeySource, cache: VerifiedTokenCache? = nil) {
        self.policy = policy
        self.keySource = keySource
        self.cache = cache.flatMap { $0.capacity > 0 ? $0 : nil }
        if case .tenantTemplate(let template) = policy.issuers { issuerTemplate = TenantIssuerTemplate(template) } else { issuerTemplate = nil }
    }

    /// Verifies with the keys the source holds now. An unknown `kid` is `unknown_key` at once.
    ///
    /// - Parameters:
    ///   - token: the compact JWS as received.
    ///   - nonce: the raw nonce the app generated for this sign-in, if any.
    ///   - now: the time to judge `exp`, `nbf` and `iat` against, in Unix seconds. Pass a past time only to
    ///     verify a logged token as of when it was used (the contract's `at`).
    ///   - historical: verify a logged token as of `now` (the contract's `at`): keys since rotated out are taken
    ///     from the key archive, but only for tokens issued while that key was published. Off, only the keys
    ///     published now are used.
    public func verify(token: String, nonce: String?, at now: Int64, historical: Bool = false) -> VerificationResult {
        do throws(VerificationError) {
            // The size first. A cache hit is byte-for-byte a token that passed every check (its alphabet too), so the
            // alphabet is checked after the lookup; nothing outside it reaches a store or a key lookup.
            if token.utf8.count > policy.maxTokenBytes { try checkBytes(token) }
            if !historical, let cache, let hit = try cachedVerdict(cache, token: token, nonce: nonce, now: now) { return .success(hit) }
            // The keys are fetched first only to offer their known headers to the parse: a refusal of the token itself
            // still comes before one of the keys, as it would without them. A logged token verified at its own time
            // (a batch line's `at`) uses the headers known to the keys of that path: parsing does not depend on time.
            let keySet = historical ? keySource.historicalKeys() : keySource.currentKeys()
            // Within the size limit (checked first, above). Checked where the token's bytes lie (a copy only for a string
            // that does not hold them contiguously): the signature is checked over them, so the signing input is not
            // copied out.
            if let result = token.utf8.withContiguousStorageIfAvailable({
                verifyParsing($0, token: token, keySet: keySet, nonce: nonce, now: now, historical: historical)
            }) {
                return result
            }
            return Array(token.utf8).withUnsafeBufferPointer {
                verifyParsing($0, token: token, keySet: keySet, nonce: nonce, now: now, historical: historical)
            }
        } catch {
            return .failure(error)
        }
    }

    /// Parse, algorithm, keys, signature, type and claims, in that order, over `token`'s `bytes`: the answer
    /// ``parseCheckingBytes(_:knownHeaders:)`` then ``finish(_:alg:keys:nonce:now:)`` give, with the signature checked
    /// over the bytes' first segments rather than over a copy of them; a verdict for a token presented now is
    /// remembered. The keys are fetched before the parse only to offer their known headers to it: a refusal of the
    /// token itself still comes before one of the keys.
    private func verifyParsing(
        _ bytes: UnsafeBufferPointer<UInt8>, token: String, keySet: Result<KeySet, VerificationError>, nonce: String?, now: Int64,
        historical: Bool
    ) -> VerificationResult {
        do throws(VerificationError) {
            let knownHeaders = (try? keySet.get())?.verifiedHeaders
            let jws = try Self.parseCheckingBytes(bytes, knownHeaders: knownHeaders, copiesSigningInput: false)
            let alg = try checkAlgorithm(jws.header)
            let keys = try keySet.get()
            let key = try checkSignature(
                jws, signingInput: UnsafeBufferPointer(rebasing: bytes[..<jws.signingInputCount]), alg: alg, keys: keys)
            try checkTokenType(jws.header)
            let verdict = try checkClaims(try payloadClaims(jws), key: key, nonce: nonce, now: now)
            if !historical { remember(token, verdict: verdict, key: key, keys: keys, keyID: jws.header.keyID, nonce: nonce, now: now) }
            if !jws.headerWasKnown {
                knownHeaders?.keep(jws.header, encoded: Array(UnsafeBufferPointer(rebasing: bytes[..<jws.headerSegmentCount]))[...])
            }
            return .success(verdict)
        } catch {
            return .failure(error)
        }
    }

    /// Caches a verdict under the token's bytes, with the binding of the key that verified it (its material, kid, alg
    /// and issuer — not merely the first key with its kid), so the entry dies with that key or any change to it, and
    /// the generation of the key set it was found in (while that set is current, the key is in it). A token that named
    /// no key (no `kid`) was accepted because one key alone fits it, which depends on every other key in the set: its
    /// entry lives only as long as that set.
    func remember(_ token: String, verdict: Verdict, key: VerificationKey, keys: KeySet, keyID: String?, nonce: String?, now: Int64) {
        guard let cache else { return }
        cache.store(
            token,
            VerifiedTokenCache.Entry(
                verdict: verdict, keyBinding: keyID == nil ? nil : key.binding, keyID: keyID, keySetGeneration: keys.generation,
                nonceClaim: verdict.claim("nonce")?.stringValue, expiresAt: verdict.expiresAt ?? now, verifiedRawNonce: nonce))
    }

    /// The token's segments, with the answer ``checkBytes(_:)`` then ``parse(_:)`` would give. The strict base64url
    /// decoding admits only the alphabet and two dots, so a token that parses passes the alphabet check; that scan is
    /// run only when the common-case parse fails, over the bytes it did not decode, to give its own refusal when it
    /// applies.
    func parseCheckingBytes(_ token: String, knownHeaders: VerifiedHeaders? = nil) throws(VerificationError) -> CompactJWS {
        let count = token.utf8.count
        guard count <= policy.maxTokenBytes else {
            throw VerificationError(.tokenTooLarge, "token is \(count) bytes; the limit is \(policy.maxTokenBytes)")
        }
        // Looked at where the token's bytes lie, before any copy. A byte outside the alphabet is the refusal whatever else
        // is wrong: one at either end (a newline, quote or space left from copying the token) is refused at once. A token
        // with fewer than two dots (most junk) is refused by the alphabet, then by its segment count, as the exact parse
        // would. Otherwise it is parsed in place (a copy only for a string that does not hold its bytes contiguously):
        // the parse copies the signing input only once the segments decoded, so a refused token is never copied.
        let inPlace = token.utf8.withContiguousStorageIfAvailable { bytes in
            Result { () throws(VerificationError) -> CompactJWS in try Self.parseCheckingBytes(bytes, knownHeaders: knownHeaders) }
        }
        if let inPlace { return try inPlace.get() }
        return try Array(token.utf8).withUnsafeBufferPointer { (bytes) throws(VerificationError) -> CompactJWS in
            try Self.parseCheckingBytes(bytes, knownHeaders: knownHeaders)
        }
    }

    private static func parseCheckingBytes(
        _ bytes: UnsafeBufferPointer<UInt8>, knownHeaders: VerifiedHeaders?, copiesSigningInput: Bool = true
    ) throws(VerificationError) -> CompactJWS {
        if let first = bytes.first, let last = bytes.last, !CompactJWSAlphabet.isAllowed(first) || !CompactJWSAlphabet.isAllowed(last) {
            throw VerificationError(.malformedToken, CompactJWSAlphabet.refusal)
        }
        let dots = CompactJWS.outerDots(in: bytes)
        if dots.map({ $0.first == $0.last }) ?? true {
            guard CompactJWSAlphabet.admits(buffer: bytes) else { throw VerificationError(.malformedToken, CompactJWSAlphabet.refusal) }
            throw CompactJWS.fewerThanThreeSegments(byteCount: bytes.count, hasDot: dots != nil)
        }
        var inAlphabet = 0
        var outsideAlphabet = false
        if let jws = try CompactJWS.parseCommonCase(
            bytes, knownHeaders: knownHeaders, inAlphabet: &inAlphabet, outsideAlphabet: &outsideAlphabet, dots: dots,
            copiesSigningInput: copiesSigningInput)
        {
            return jws
        }
        // A byte outside the alphabet is the refusal whatever else is wrong, so it is looked for before the exact parse
        // words a structural one (a malformed token is decoded once, not twice), from where the decoding stopped;
        // not at all when the decoding met one (an altered signature is refused without another pass).
        let admitted = !outsideAlphabet && CompactJWSAlphabet.admits(buffer: UnsafeBufferPointer(rebasing: bytes[inAlphabet...]))
        guard admitted else { throw VerificationError(.malformedToken, CompactJWSAlphabet.refusal) }
        return try CompactJWS.parseExactly(bytes)
    }

    /// The size limit, then the alphabet: both before any other work.
    func checkBytes(_ token: String) throws(VerificationError) {
        let count = token.utf8.count
        guard count <= policy.maxTokenBytes else {
            throw VerificationError(.tokenTooLarge, "token is \(count) bytes; the limit is \(policy.maxTokenBytes)")
        }
        guard CompactJWSAlphabet.admits(token) else { throw VerificationError(.malformedToken, CompactJWSAlphabet.refusal) }
    }

    /// A cache hit, re-checked: not expired now, key still published, and the request's nonce against the token's.
    private func cachedVerdict(_ cache: VerifiedTokenCache, token: String, nonce: String?, now: Int64) throws(VerificationError) -> Verdict? {
        guard token.utf8.count <= policy.maxTokenBytes else { return nil }
        guard case .success(let keys) = keySource.currentKeys() else { return nil }
        guard let entry = cache.lookup(token, now: now, leeway: policy.leewaySeconds, keys: keys) else {
            return nil
        }
        // The same raw nonce as when the token was verified matches by construction; any other goes the full way.
        if let nonce, let verified = entry.verifiedRawNonce, ConstantTime.equals(nonce, verified) { return entry.verdict }
        try checkNonce(claimed: entry.nonceClaim, requested: nonce)
        return entry.verdict
    }

    /// As ``verify(token:nonce:at:)``, but on an unknown `kid` asks the key source for newer keys once
    /// (a fetching source refreshes, single-flight and rate-limited) before answering `unknown_key`.
    public func verifyRefreshingKeys(token: String, nonce: String?, at now: Int64, historical: Bool = false) async -> VerificationResult {
        await verifyRefreshingKeys(token: token, nonce: nonce, at: now, historical: historical, explain: false).result
    }

    /// One verification, with the explanation when `explain` is set: the signature is checked once either way.
    public func verifyRefreshingKeys(
        token: String, nonce: String?, at now: Int64, historical: Bool, explain: Bool
    ) async -> (result: VerificationResult, explanation: Explanation?) {
        func attempt() -> (VerificationResult, Explanation?) {
            if explain {
                let (result, explanation) = verifyExplaining(token: token, nonce: nonce, at: now, historical: historical)
                return (result, explanation)
            }
            return (verify(token: token, nonce: nonce, at: now, historical: historical), nil)
        }
        let keysBefore = historical ? nil : try? keySource.currentKeys().get()
        let first = attempt()
        // `keys_unavailable` with keys in hand is a tenant name not resolved yet: new keys would not change it.
        guard case .failure(let error) = first.0, error.code == .unknownKey || (error.code == .keysUnavailable && keysBefore == nil) else {
            return first
        }
        let keyID: String?
        do {
            try checkBytes(token)
            keyID = try parse(token).header.keyID
        } catch {
            return first
        }
        // Keys that arrived while the first attempt ran (at a cold start, a fetch completing just then) are tried
        // before another fetch is asked for, with or without a kid. A miss checked no signature, so this is still one.
        if !historical, let keysNow = try? keySource.currentKeys().get(), keysNow !== keysBefore { return attempt() }
        switch await keySource.keysAfterMiss(keyID: keyID) {
        case nil: return first
        // The refetch failed: an unknown kid during an outage cannot be judged a forgery.
        case .failure(let refetchError)?: return (.failure(refetchError), first.1)
        // The first attempt found no key, so it checked no signature: this is still one signature check.
        case .success?: return attempt()
        }
    }

    /// Checks structure, algorithm, key and signature only, without reading the payload as claims.
    ///
    /// This is the JWS layer on its own (RFC 7515): the whole-JWS test vectors and the libjwt differential
    /// test use it, since their payloads need not be JSON claims.
    public func verifySignature(token: String) -> Result<(jws: CompactJWS, key: VerificationKey), VerificationError> {
        do {
            try checkBytes(token)
            let jws = try parse(token)
            let alg = try checkAlgorithm(jws.header)
            let keys = try keySource.currentKeys().get()
            return .success((jws, try checkSignature(jws, alg: alg, keys: keys)))
        } catch {
            return .failure(error)
        }
    }

    // MARK: - Steps

    func parse(_ token: String, knownHeaders: VerifiedHeaders? = nil) throws(VerificationError) -> CompactJWS {
        let utf8 = token.utf8
        guard utf8.count <= policy.maxTokenBytes else {
            throw VerificationError(.tokenTooLarge, "token is \(utf8.count) bytes; the limit is \(policy.maxTokenBytes)")
        }
        return try CompactJWS.parse(Array(utf8), maxBytes: policy.maxTokenBytes, knownHeaders: knownHeaders)
    }

    /// The algorithm must be a known asymmetric JWS algorithm in this provider's allow-list.
    func checkAlgorithm(_ header: JOSEHeader) throws(VerificationError) -> SignatureAlgorithm {
        let name = header.algorithm
        // The common case: exactly the bytes of an allowed algorithm's name (none of which is `none` or an HMAC).
        if let alg = policy.algorithms.first(where: { name.sameBytes(as: $0.rawValue) }) {
            try checkHeaderNonce(header)
            return alg
        }
        let folded = ASCII.lowercased(name)
        if folded.sameBytes(as: "none") {
            throw VerificationError(.unsupportedAlgorithm, "alg none is never accepted")
        }
        if folded.utf8.starts(with: "hs".utf8) {
            throw VerificationError(.unsupportedAlgorithm, "HMAC algorithms are never accepted: a public key is not a secret")
        }
        guard let alg = SignatureAlgorithm(rawValue: name) else {
            throw VerificationError(.unsupportedAlgorithm, "alg \"\(name.excerpt(bytes: 16))\" is not supported")
        }
        guard policy.algorithms.contains(alg) else {
            let allowed = policy.algorithms.map(\.rawValue).sorted().joined(separator: ", ")
            throw VerificationError(.unsupportedAlgorithm, "alg \(alg.rawValue) is not allowed for \(policy.name) (allowed: \(allowed))")
        }
        try checkHeaderNonce(header)
        return alg
    }

    func checkHeaderNonce(_ header: JOSEHeader) throws(VerificationError) {
        if policy.rejectsHeaderNonce && header.hasNonce {
            throw VerificationError(
                .malformedToken, "the JWS header carries a nonce: this is a Microsoft Graph access token, not an ID token")
        }
    }

    /// Signature, token type, then claims. Returns the verdict and the key that verified it.
    func finish(
        _ jws: CompactJWS, alg: SignatureAlgorithm, keys: KeySet, nonce: String?, now: Int64
    ) throws(VerificationError) -> (Verdict, VerificationKey) {
        let key = try checkSignature(jws, alg: alg, keys: keys)
        try checkTokenType(jws.header)
        let claims = try payloadClaims(jws)
        return (try checkClaims(claims, key: key, nonce: nonce, now: now), key)
    }

    /// The payload checked as one JSON object and indexed: only the members the checks read are decoded.
    func payloadClaims(_ jws: CompactJWS) throws(VerificationError) -> IndexedJSONObject {
        do {
            return try IndexedJSONObject(jws.payload)
        } catch {
            throw VerificationError(.malformedToken, "the payload is not a valid JSON object: \(error)")
        }
    }

    /// Explicit typing (RFC 8725 §3.11): an ID-token provider refuses JWT access tokens (`at+jwt`, RFC 9068) and
    /// any other `typ` it does not list. Compared case-insensitively over ASCII; "" stands for no `typ`.
    func checkTokenType(_ header: JOSEHeader) throws(VerificationError) {
        let type = header.type ?? ""
        guard policy.tokenTypes.contains(where: { ASCII.lowercased(type, hasBytesOf: $0) }) else {
            let shown = header.type.map { "\"\($0.excerpt(bytes: 32))\"" } ?? "no typ"
            throw VerificationError(.invalidTokenType, "token type \(shown) is not accepted for \(policy.name) (an access token is not an ID token)")
        }
    }

    /// Finds the key by `kid` and checks the signature. Returns the key that verified.
    func checkSignature(_ jws: CompactJWS, alg: SignatureAlgorithm, keys: KeySet) throws(VerificationError) -> VerificationKey {
        try jws.signingInput.withUnsafeBufferPointer { signingInput in
            Result { () throws(VerificationError) in try checkSignature(jws, signingInput: signingInput, alg: alg, keys: keys) }
        }.get()
    }

    /// The same, with the signing input given (the token's first two segments, as received).
    func checkSignature(
        _ jws: CompactJWS, signingInput: UnsafeBufferPointer<UInt8>, alg: SignatureAlgorithm, keys: KeySet
    ) throws(VerificationError) -> VerificationKey {
        let candidates = keys.candidates(keyID: jws.header.keyID, algorithm: alg)
        guard !candidates.isEmpty else {
            if let kid = jws.header.keyID {
                if let reason = keys.skipReason(keyID: kid) {
                    throw VerificationError(
                        .unknownKey, "key \"\(kid.excerpt(bytes: 64))\" was skipped when the \(policy.name) JWKS was loaded: \(reason)")
                }
                throw VerificationError(.unknownKey, "no key with kid \"\(kid.excerpt(bytes: 64))\" for \(policy.name)")
            }
            throw VerificationError(.unknownKey, "the token has no kid and no single \(policy.name) key fits \(alg.rawValue)")
        }
        var anyFits = false
        for index in candidates.indices where candidates[index].permits(alg) {
            anyFits = true
            let result = jws.signature.withUnsafeBufferPointer { signature in
                SignatureVerifier.verify(signature: signature, message: signingInput, key: candidates[index].publicKey, algorithm: alg)
            }
            if case .success = result { return candidates[index] }
        }
        guard anyFits else {
            let key = candidates[0]
            if let keyAlg = key.algorithm, keyAlg != alg {
                throw VerificationError(.unsupportedAlgorithm, "the token uses \(alg.rawValue) but its key is for \(keyAlg.rawValue)")
            }
            throw VerificationError(.unsupportedAlgorithm, "\(alg.rawValue) does not fit the token's \(key.publicKey.keyType) key")
        }
        throw VerificationError(.invalidSignature, "the signature does not verify with key \"\((jws.header.keyID ?? "").excerpt(bytes: 64))\"")
    }

    /// `claims` is consumed: the reader holds it, then hands it to the verdict (one reference each to its bytes and its
    /// members, not a count per copy).
    func checkClaims(_ claims: consuming IndexedJSONObject, key: VerificationKey, nonce: String?, now: Int64) throws(VerificationError)
        -> Verdict
    {
        let reader = ClaimsReader(claims: claims)
        let (issuer, tenantID) = try checkIssuer(reader, key: key)
        let audience = try checkAudience(reader)
        try checkAuthorizedParty(reader)
        // A tenant that cannot be decided now (a configured name not resolved yet) is answered after the other
        // checks: an expired or otherwise refused token is refused for what it is.
        var undecidedTenant: VerificationError? = nil
        do {
            try checkTenant(tenantID)
        } catch  where error.code == .keysUnavailable {
            undecidedTenant = error
        }
        let expiresAt = try checkExpiry(reader, now: now)
        try checkNotBefore(reader, now: now)
        let issuedAt = try checkIssuedAt(reader, key: key, now: now)
        if !nonceMatchesPlainClaim(reader, requested: nonce) { try checkNonce(claimed: try reader.string(.nonce), requested: nonce) }
        // A signed payload carrying `events` is a provider's server-to-server notification (Apple signs those with
        // the same keys, for the same audience): never a sign-in.
        if reader.contains(.events) {
            throw VerificationError(.invalidTokenType, "the payload carries events: a server-to-server notification is not an ID token")
        }
        // An empty identity names no one: a backend keying accounts by it would put every such token in one account.
        // An identity no revocation can name (over its byte limit, or with a NUL) would verify for ever once signed.
        let subject = try reader.requiredString(.sub)
        guard Revocation.isValidSubject(subject) else { throw Self.unusableIdentity("sub", subject) }
        let userIDIsSubject = policy.userIDClaim == "sub"
        let userID = userIDIsSubject ? subject : try reader.requiredString(policy.userIDClaim)
        guard userIDIsSubject || Revocation.isValidSubject(userID) else { throw Self.unusableIdentity(policy.userIDClaim, userID) }
        if let undecidedTenant { throw undecidedTenant }
        let email = try reader.string(.email)
        let emailIsVerified = try emailVerified(reader, email: email)
        let appleFlags = policy.kind == .apple ? Self.appleFlags(reader) : nil
        return Verdict(
            provider: policy.name, subject: subject, userID: userID, issuer: issuer, audience: audience, expiresAt: expiresAt,
            issuedAt: issuedAt, keyID: key.keyID, email: email, emailVerified: emailIsVerified, tenantID: tenantID,
            claims: (consume reader).claims, appleFlags: appleFlags)
    }

    private static func unusableIdentity(_ claim: String, _ value: String) -> VerificationError {
        let problem =
            value.isEmpty
            ? "is empty" : value.utf8.contains(0) ? "contains a NUL byte" : "is over \(Revocation.maximumSubjectBytes) bytes"
        return VerificationError(.malformedToken, "claim \(claim.excerpt(bytes: 64)) \(problem): no account or revocation can name it")
    }

    /// The common case of ``checkNonce(claimed:requested:)`` without making strings: a nonce was given, and the
    /// token's is a string without escapes that matches it. False sends the caller the full way (which also words any
    /// refusal).
    func nonceMatchesPlainClaim(_ reader: ClaimsReader, requested: String?) -> Bool {
        guard let requested, !requested.isEmpty, requested.utf8.count <= Self.maximumNonceBytes else { return false }
        return reader.withPlainString(.nonce) { claimed in nonce(requested, matches: claimed) } == true
    }

    /// The nonce rule itself, over the token's nonce bytes: SHA-256 hex of the raw nonce, or the raw nonce, compared in
    /// constant time.
    func nonce(_ requested: String, matches claimed: some Collection<UInt8>) -> Bool {
        let inPlace = claimed.withContiguousStorageIfAvailable { claimed in
            requested.utf8.withContiguousStorageIfAvailable { requested in nonce(bytes: requested, matches: claimed) }
        }
        if let inPlace, let result = inPlace { return result }
        return Array(requested.utf8).withUnsafeBufferPointer { requested in
            Array(claimed).withUnsafeBufferPointer { claimed in nonce(bytes: requested, matches: claimed) }
        }
    }

    private func nonce(bytes requested: UnsafeBufferPointer<UInt8>, matches claimed: UnsafeBufferPointer<UInt8>) -> Bool {
        switch policy.nonceMode {
        case .sha256: SHA256.hexDigest(of: requested, equals: claimed)
        case .raw: ConstantTime.equals(requested, claimed)
        }
    }

    /// Apple's account flags, normalised: `is_private_email` a boolean (Apple sent the string "true" before 2024;
    /// absent is false), `real_user_status` an integer 0–2 (0 unsupported, 1 unknown, 2 likely real) or null.
    static func appleFlags(_ reader: ClaimsReader) -> AppleAccountFlags {
        let isPrivate: Bool
        switch reader.value(.isPrivateEmail) {
        case .bool(let flag)?: isPrivate = flag
        case .string(let text)?: isPrivate = text.sameBytes(as: "true")
        default: isPrivate = false
        }
        var status: Int8? = nil
        switch reader.value(.realUserStatus) {
        case .integer(let value)? where (0...2).contains(value): status = Int8(value)
        case .string(let text)? where ["0", "1", "2"].containsBytes(text): status = Int8(text) ?? 0
        default: break
        }
        return AppleAccountFlags(isPrivateEmail: isPrivate, realUserStatus: status)
    }

    /// Whether the verdict's email can be trusted: never without an `email` (a verdict saying `"email": null,
    /// "email_verified": true` would vouch for nothing). Microsoft sends no trustworthy `email_verified` ("nOAuth": a
    /// tenant can put any unverified email in its tokens): only `xms_edov` (email domain owner verified) counts.
    /// Other providers: their `email_verified` claim, checked for its type even when there is no `email`.
    func emailVerified(_ reader: ClaimsReader, email: String?) throws(VerificationError) -> Bool {
        guard policy.kind == .microsoft || policy.kind == .microsoftExternalID else {
            let claimed = try reader.emailVerified()
            guard let email, !email.isEmpty else { return false }
            return claimed
        }
        guard let email, !email.isEmpty else { return false }
        switch reader.value(.xmsEdov) {
        case .bool(true)?, .string("1")?, .string("true")?: return true
        default: return false
        }
    }

    /// `iss`, exact; for Microsoft built from the token's own `tid` and agreeing with the key's `issuer`.
    /// Returns the issuer and, for Microsoft, the tenant.
    func checkIssuer(_ reader: ClaimsReader, key: VerificationKey?) throws(VerificationError) -> (String, String?) {
        // The common case without making a string: `iss` is a plain string equal to an accepted issuer (returned
        // as configured: the same bytes).
        if case .exact(let accepted) = policy.issuers,
            let match = reader.withPlainString(.iss, { raw in accepted.first { $0.sameBytes(as: raw) } }), let match
        {
            return (match, nil)
        }
        guard let issuer = try reader.string(.iss) else { throw VerificationError(.invalidIssuer, "claim iss is missing") }
        switch policy.issuers {
        case .exact(let accepted):
            guard accepted.containsBytes(issuer) else {
                throw VerificationError(.invalidIssuer, "issuer \"\(issuer.excerpt(bytes: 128))\" is not accepted for \(policy.name)")
            }
            return (issuer, nil)
        case .tenantTemplate(let template):
            guard let tid = try reader.string(.tid) else { throw VerificationError(.invalidIssuer, "claim tid is missing") }
            // Only a well-formed GUID goes into the template, so a crafted tid cannot shape the issuer string.
            guard GUID.isValid(tid) else { throw VerificationError(.invalidIssuer, "claim tid is not a tenant GUID") }
            if policy.acceptsV2Tokens, issuerTemplate?.matches(tid: tid, issuer: issuer) ?? false {
                // `ver` read where it lies when it is plainly "2.0"; any other value is read whole and judged.
                if !reader.isPlainString(.ver, "2.0"), let version = try reader.string(.ver), !version.sameBytes(as: "2.0") {
                    throw VerificationError(.invalidIssuer, "a v2.0 issuer with ver \"\(version.excerpt(bytes: 16))\"")
                }
                if let keyIssuer = key?.issuerTemplate, !keyIssuer.matches(tid: tid, issuer: issuer) {
                    throw VerificationError(
                        .invalidIssuer,
                        "issuer \"\(issuer.excerpt(bytes: 128))\" is not the issuer of key \"\((key?.keyID ?? "").excerpt(bytes: 64))\"")
                }
            } else if let v1 = policy.v1IssuerTemplate, issuer.sameBytes(as: v1.replacingTenantID(with: tid)) {
                let version = try reader.string(.ver)
                // A v1.0 token: the key's issuer property is a v2.0 template and is not compared with the v1 issuer —
                // but a key bound to one tenant (no template) still vouches for that tenant only.
                if let version, !version.sameBytes(as: "1.0") {
                    throw VerificationError(.invalidIssuer, "a v1.0 issuer with ver \"\(version.excerpt(bytes: 16))\"")
                }
                if let keyIssuer = key?.issuer, !keyIssuer.replacingTenantID(with: tid).sameBytes(as: template.replacingTenantID(with: tid)) {
                    throw VerificationError(
                        .invalidIssuer, "key \"\((key?.keyID ?? "").excerpt(bytes: 64))\" is bound to another tenant than \(tid)")
                }
            } else {
                // A `ver` that is not a string is refused for that first, as on the branches above.
                _ = try reader.string(.ver)
                var accepted: [String] = []
                if policy.acceptsV2Tokens { accepted.append(template.replacingTenantID(with: tid)) }
                if let v1 = policy.v1IssuerTemplate { accepted.append(v1.replacingTenantID(with: tid)) }
                throw VerificationError(
                    .invalidIssuer,
                    "issuer \"\(issuer.excerpt(bytes: 128))\" does not match tenant \(tid) (expected \(accepted.joined(separator: " or ")))")
            }
            return (issuer, tid)
        }
    }

    /// `aud`: a string or array, one entry of which must be a configured audience. Returns the match.
    func checkAudience(_ reader: ClaimsReader) throws(VerificationError) -> String {
        guard !policy.audiences.isEmpty else {
            throw VerificationError(
                .invalidAudience,
                "no audiences are configured for \(policy.name): set its audiences (or TOKENGUARD_\(policy.name.uppercased())_AUDIENCES)")
        }
        // The common case without making strings: `aud` is one plain string equal to a configured audience.
        if let match = reader.withPlainString(.aud, { raw in policy.audiences.first { $0.sameBytes(as: raw) } }), let match {
            return match
        }
        let tokenAudiences = try reader.audiences()
        guard let audience = policy.audiences.first(where: { tokenAudiences.containsBytes($0) }) else {
            // At most four quoted, each capped: a token can carry thousands of audiences.
            var listed = tokenAudiences.prefix(4).map { "\"\($0.excerpt(bytes: 128))\"" }.joined(separator: ", ")
            if tokenAudiences.count > 4 { listed += " and \(tokenAudiences.count - 4) more" }
            throw VerificationError(.invalidAudience, "audience \(listed) is not configured for \(policy.name)")
        }
        return audience
    }

    /// `azp` (OIDC Core 3.1.3.7): when present, one of the provider's authorized parties (default: its audiences).
    func checkAuthorizedParty(_ reader: ClaimsReader) throws(VerificationError) {
        guard let party = try reader.string(.azp) else { return }
        let allowed = policy.authorizedParties ?? policy.audiences
        guard allowed.containsBytes(party) else {
            throw VerificationError(.invalidAudience, "authorized party (azp) \"\(party.excerpt(bytes: 128))\" is not allowed for \(policy.name)")
        }
    }

    func checkTenant(_ tenantID: String?) throws(VerificationError) {
        if case .unset(let hint)? = policy.tenants {
            throw VerificationError(.tenantNotAllowed, "no tenants are configured for \(policy.name): \(hint)")
        }
        if let rule = policy.tenants, let tid = tenantID, !rule.allows(tid) {
            // Tenants named by domain: resolved outside the core (and maybe not yet).
            if let directory = policy.tenantDirectory {
                if let error = directory.check(tenantID: tid) { throw error }
                return
            }
            throw VerificationError(.tenantNotAllowed, "tenant \(tid) is not allowed for \(policy.name)")
        }
    }

    /// `exp`, required. Expired when now ≥ exp + leeway: at exactly exp + leeway the token is already refused.
    func checkExpiry(_ reader: ClaimsReader, now: Int64) throws(VerificationError) -> Int64 {
        guard let expiresAt = try reader.numericDate(.exp) else { throw VerificationError(.malformedToken, "claim exp is missing") }
        if now >= expiresAt + policy.leewaySeconds {
            throw VerificationError(.tokenExpired, "token expired at \(UTCTime.iso8601(expiresAt)) (leeway \(policy.leewaySeconds)s)")
        }
        return expiresAt
    }

    func checkNotBefore(_ reader: ClaimsReader, now: Int64) throws(VerificationError) {
        if let notBefore = try reader.numericDate(.nbf), now + policy.leewaySeconds < notBefore {
            throw VerificationError(.tokenNotYetValid, "token not valid before \(UTCTime.iso8601(notBefore)) (leeway \(policy.leewaySeconds)s)")
        }
    }

    /// `iat` not in the future (beyond the leeway); for an archived key, within the time the key was published.
    func checkIssuedAt(_ reader: ClaimsReader, key: VerificationKey?, now: Int64) throws(VerificationError) -> Int64? {
        let issuedAt = try reader.numericDate(.iat)
        if let key, let window = key.publishedWindow {
            guard let issuedAt, window.contains(issuedAt) else {
                throw VerificationError(
                    .unknownKey,
                    "key \"\((key.keyID ?? "").excerpt(bytes: 64))\" was published from \(UTCTime.iso8601(window.lowerBound + 86_400)) to \(UTCTime.iso8601(window.upperBound)); this token was issued \(issuedAt.map(UTCTime.iso8601) ?? "at no stated time")"
                )
            }
        }
        if let issuedAt, issuedAt > now + policy.leewaySeconds {
            throw VerificationError(
                .tokenIssuedInFuture,
                "token issued at \(UTCTime.iso8601(issuedAt)), \(issuedAt - now)s in the future (leeway \(policy.leewaySeconds)s)")
        }
        return issuedAt
    }

    /// The contract's nonce rules; the comparison is constant-time.
    func checkNonce(claimed: String?, requested: String?) throws(VerificationError) {
        guard let requested else {
            if policy.nonceRequired {
                throw VerificationError(.nonceMissing, "\(policy.name) requires the raw nonce of the sign-in request")
            }
            return
        }
        guard requested.utf8.count <= Self.maximumNonceBytes else {
            throw VerificationError(.invalidRequest, "nonce is longer than \(Self.maximumNonceBytes) bytes")
        }
        // Every front end refuses an empty nonce; so does the core, whoever calls it.
        guard !requested.isEmpty else { throw VerificationError(.invalidRequest, "nonce must be a non-empty string") }
        guard let claimed else { throw VerificationError(.nonceMissing, "a nonce was given but the token carries none") }
        guard nonce(requested, matches: claimed.utf8) else {
            throw VerificationError(
                .nonceMismatch,
                policy.nonceMode == .sha256
                    ? "the token's nonce is not the SHA-256 hex of the given nonce" : "the token's nonce does not equal the given nonce")
        }
    }
}

extension String {
    /// The issuer template with `{tenantid}` replaced, over bytes (Swift's `replacing` walks Characters: several
    /// microseconds per Microsoft token, and identities are bytes anyway).
    func replacingTenantID(with tid: String) -> String {
        let placeholder = Array("{tenantid}".utf8)
        let bytes = Array(utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + tid.utf8.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == placeholder[0], index + placeholder.count <= bytes.count,
                bytes[index..<(index + placeholder.count)].elementsEqual(placeholder)
            {
                out.append(contentsOf: tid.utf8)
                index += placeholder.count
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// ISO 8601 UTC formatting for messages, without Foundation's formatters.
package enum UTCTime {
    package static func iso8601(_ value: Int64) -> String {
        // Total over every Int64: values outside 0001-01-01…9999-12-31 are shown clamped, never overflow.
        let seconds = min(max(value, -62_135_596_800), 253_402_300_799)
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondsOfDay = seconds - days * 86_400
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return
            "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondsOfDay / 3600, 2)):\(pad(secondsOfDay % 3600 / 60, 2)):\(pad(secondsOfDay % 60, 2))Z"
    }
}
