import TokenGuardCrypto
import TokenGuardService

@testable import TokenGuardCore

/// The compact-JWS parser and the whole verifier, against the sample providers' real keys.
///
/// Properties: nothing traps; an accepted token is canonical (re-encoding its decoded segments gives the
/// input back), uses an allowed asymmetric algorithm, verifies again with the bare signature check, is not
/// expired and names a configured audience; verifying twice (the second time from the verified-token cache)
/// gives the same verdict; `explain` agrees with the verdict; no error message repeats the signature.
enum JWSFuzzTarget {
    /// The parse's shortcuts (dots from both ends; a header already known) give what the exact parse gives.
    static func checkShortcuts(_ bytes: [UInt8]) {
        func outcome(_ parse: () throws(VerificationError) -> CompactJWS) -> String {
            do {
                let jws = try parse()
                let header = jws.header
                return "\(Array(jws.signingInput)) \(Array(jws.payload)) \(Array(jws.signature)) \(Array(jws.encodedHeader)) \(header.algorithm)"
                    + " \(header.keyID ?? "-") \(header.type ?? "-") \(header.hasNonce) \(header.ignoredKeyReferences)"
            } catch {
                return "\(error.code) \(error.message)"
            }
        }
        let guarded = bytes.count <= 16_384
        let exact = outcome { () throws(VerificationError) in try CompactJWS.parseExactly(bytes) }
        let fast = outcome { () throws(VerificationError) in try CompactJWS.parse(bytes, maxBytes: 16_384) }
        if guarded { require(fast == exact, "the two-ended parse differs from the exact one") }
        // With the header of this token (or of a shorter prefix) known, as after a verification.
        let known = VerifiedHeaders()
        if let jws = try? CompactJWS.parseExactly(bytes) { known.keep(jws.header, encoded: jws.encodedHeader) }
        let withKnown = outcome { () throws(VerificationError) in try CompactJWS.parse(bytes, maxBytes: 16_384, knownHeaders: known) }
        if guarded { require(withKnown == exact, "the parse with a known header differs from the exact one") }
        // The verifier's order (the alphabet looked for from where decoding stopped, before the exact parse words a
        // refusal) answers as the whole alphabet check followed by the parse.
        if let verifier = FuzzFixtures.verifiers.first?.1 {
            let text = String(decoding: bytes, as: UTF8.self)
            let ordered = outcome { () throws(VerificationError) in try verifier.parseCheckingBytes(text, knownHeaders: known) }
            let plain = outcome { () throws(VerificationError) in
                try verifier.checkBytes(text)
                return try verifier.parse(text)
            }
            require(ordered == plain, "the verifier's parse order changes the answer")
        }
    }

    static let target = FuzzTarget(name: "jws", summary: "compact JWS parser and full verification (examples/ keys)") { bytes in
        let parsed = try? CompactJWS.parse(bytes, maxBytes: 16_384)
        if let parsed { checkCanonical(parsed, bytes) }
        checkShortcuts(bytes)
        let token = String(decoding: bytes, as: UTF8.self)
        let nonce = FuzzFixtures.nonces[bytes.count % FuzzFixtures.nonces.count]
        // Tokens are bytes: anything outside the compact JWS alphabet is refused before any cache or key lookup.
        let admitted = bytes.allSatisfy { CompactJWSAlphabet.isAllowed($0) }
        for (name, verifier) in FuzzFixtures.verifiers {
            let result = verifier.verify(token: token, nonce: nonce, at: FuzzFixtures.now)
            if !admitted && token.utf8.count <= verifier.policy.maxTokenBytes {
                require(result.code == .malformedToken, "\(name): a token with a byte outside the alphabet got \(String(describing: result.code))")
            }
            if case .success = result {
                // A cache hit returns a verdict only for a byte-identical token: look-alikes of a cached token fail.
                for variant in [token.replacing("K", with: "\u{212A}"), token + "\u{200B}", token + "\u{0}", "\u{FEFF}" + token]
                where !variant.sameBytes(as: token) {
                    require(
                        verifier.verify(token: variant, nonce: nonce, at: FuzzFixtures.now).code == .malformedToken,
                        "\(name): a look-alike of a cached token passed")
                }
            }
            let again = verifier.verify(token: token, nonce: nonce, at: FuzzFixtures.now)
            switch (result, again) {
            case (.success(let verdict), .success(let second)):
                require(verdict.subject == second.subject && verdict.expiresAt == second.expiresAt, "\(name): a cache hit changed the verdict")
                checkAccepted(token, verdict, verifier)
            case (.failure(let error), .failure(let second)):
                require(error.code == second.code, "\(name): \(error.code) then \(second.code) for the same token")
                checkRejected(token, error)
            default:
                fatalError("\(name): accepted once and rejected once")
            }
            let (explainedResult, explanation) = verifier.verifyExplaining(token: token, nonce: nonce, at: FuzzFixtures.now)
            require(
                explainedResult.code == result.code,
                "\(name): explain's verdict \(String(describing: explainedResult.code)) differs from \(String(describing: result.code))")
            let failed = explanation.checks.filter { $0.ok == false }.map(\.name)
            if case .success = result {
                require(failed.isEmpty, "\(name): accepted, but explain fails \(failed)")
            } else {
                require(!failed.isEmpty, "\(name): rejected, but explain finds nothing wrong")
            }
        }
    }

    static func checkCanonical(_ jws: CompactJWS, _ bytes: [UInt8]) {
        let header = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        require(header.count == 3, "parsed a token without exactly three segments")
        let signingInput = Array(header[0]) + [UInt8(ascii: ".")] + Array(header[1])
        require(Array(jws.signingInput) == signingInput, "the signing input is not the first two segments as received")
        require(Base64URL.encode(jws.payload) == String(decoding: header[1], as: UTF8.self), "the payload segment is not canonical base64url")
        require(Base64URL.encode(jws.signature) == String(decoding: header[2], as: UTF8.self), "the signature segment is not canonical base64url")
    }

    static func checkAccepted(_ token: String, _ verdict: Verdict, _ verifier: TokenVerifier) {
        let policy = verifier.policy
        guard let jws = try? CompactJWS.parse(Array(token.utf8), maxBytes: policy.maxTokenBytes) else {
            fatalError("accepted a token that does not parse")
        }
        checkCanonical(jws, Array(token.utf8))
        guard let alg = SignatureAlgorithm(rawValue: jws.header.algorithm), policy.algorithms.contains(alg) else {
            fatalError("accepted alg \(jws.header.algorithm), which \(policy.name) does not allow")
        }
        guard case .success(let keys) = verifier.keySource.currentKeys() else { fatalError("accepted without keys") }
        let verifies = keys.candidates(keyID: jws.header.keyID, algorithm: alg).contains { key in
            key.permits(alg)
                && (try? SignatureVerifier.verify(signature: jws.signature, message: jws.signingInput, key: key.publicKey, algorithm: alg).get())
                    != nil
        }
        require(verifies, "accepted a token whose signature no published key verifies")
        if let expiresAt = verdict.expiresAt {
            require(FuzzFixtures.now < expiresAt + policy.leewaySeconds, "accepted an expired token")
        } else {
            fatalError("accepted a token without exp")
        }
        require(policy.audiences.contains(verdict.audience), "accepted audience \(verdict.audience)")
    }

    static func checkRejected(_ token: String, _ error: VerificationError) {
        let allowed: Set<ErrorCode> = [
            .malformedToken, .tokenTooLarge, .unsupportedAlgorithm, .unknownKey, .invalidSignature, .invalidIssuer, .invalidAudience,
            .tenantNotAllowed, .tokenExpired, .tokenNotYetValid, .tokenIssuedInFuture, .nonceMismatch, .nonceMissing, .invalidTokenType,
        ]
        require(allowed.contains(error.code), "a token was rejected with \(error.code), which is not about the token")
        // Messages are logged and returned: they may quote a kid or a claim, never the signature.
        if let signature = token.split(separator: ".", omittingEmptySubsequences: false).dropFirst(2).first, signature.count >= 16 {
            require(!error.message.contains(signature), "an error message repeats the token's signature")
        }
    }
}
