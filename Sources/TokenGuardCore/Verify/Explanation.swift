import TokenGuardCrypto

/// Every check run on a token, with its outcome: the contract's `explain`, so an integrator sees all that is
/// wrong with a token at once, not only the first failure.
public struct Explanation: Sendable {
    public struct Check: Sendable, Equatable {
        public let name: String
        /// nil when the check could not run (an earlier step left nothing to check) or does not apply.
        public let ok: Bool?
        public let detail: String

        public init(name: String, ok: Bool?, detail: String) {
            self.name = name
            self.ok = ok
            self.detail = detail
        }

        public var json: JSONObject {
            JSONObject([("check", .string(name)), ("ok", ok.map(JSONValue.bool) ?? .null), ("detail", .string(detail))])
        }
    }

    public let checks: [Check]

    public init(checks: [Check]) { self.checks = checks }

    public var json: JSONValue { .array(checks.map { .object($0.json) }) }
}

extension TokenVerifier {
    /// Runs every check and reports each, and gives the verdict from the same pass: one signature check, the
    /// same answer ``verify(token:nonce:at:historical:)`` gives. Claims are judged even when the signature fails,
    /// marked as unauthenticated; they never change the verdict. The verified-token cache is not consulted (the
    /// explanation needs the full checks) but a valid verdict is stored in it as usual.
    public func verifyExplaining(
        token: String, nonce: String?, at now: Int64, historical: Bool = false
    ) -> (result: VerificationResult, explanation: Explanation) {
        var checks: [Explanation.Check] = []
        func add(_ name: String, _ ok: Bool?, _ detail: String) { checks.append(Explanation.Check(name: name, ok: ok, detail: detail)) }
        func notRun(_ names: [String], _ why: String) { for name in names { add(name, nil, why) } }
        let claimNames = ["issuer", "audience", "authorized-party", "tenant", "expiry", "not-before", "issued-at", "nonce"]
        func finished(_ result: VerificationResult) -> (VerificationResult, Explanation) {
            add("replay", nil, "replay protection is not enabled")
            return (result, Explanation(checks: checks))
        }

        let jws: CompactJWS
        do {
            try checkBytes(token)
            jws = try parse(token)
            let ignored = jws.header.ignoredKeyReferences
            add(
                "structure", true,
                "compact JWS, \(token.utf8.count) bytes, header \(ignored.isEmpty ? "ok" : "ok (ignored: \(ignored.joined(separator: ", ")))")")
        } catch {
            add("structure", false, "\(error)")
            notRun(["algorithm", "key", "signature", "token-type"] + claimNames, "not run: the token could not be parsed")
            return finished(.failure(error))
        }
        // The verdict is the first failure in verify's order; later checks still run for the explanation.
        var firstError: VerificationError? = nil
        func fail(_ error: VerificationError) { if firstError == nil { firstError = error } }

        var algorithm: SignatureAlgorithm? = nil
        do {
            algorithm = try checkAlgorithm(jws.header)
            add("algorithm", true, "\(jws.header.algorithm) is allowed for \(policy.name)")
        } catch {
            add("algorithm", false, "\(error)")
            fail(error)
        }
        var keySet: KeySet? = nil
        switch historical ? keySource.historicalKeys() : keySource.currentKeys() {
        case .failure(let error):
            add("key", false, error.description)
            fail(error)
        case .success(let keys):
            keySet = keys
            if let algorithm {
                let key = keys.candidates(keyID: jws.header.keyID, algorithm: algorithm).first { $0.permits(algorithm) }
                add(
                    "key", key != nil,
                    key.map { "kid \"\(($0.keyID ?? "").excerpt(bytes: 64))\": \($0.publicKey.keyType), \($0.publicKey.bits) bits" }
                        ?? "no usable key for kid \"\((jws.header.keyID ?? "none").excerpt(bytes: 64))\"")
            } else {
                add("key", nil, "not run: no acceptable algorithm")
            }
        }
        var verifiedKey: VerificationKey? = nil
        if let algorithm, let keySet {
            do {
                verifiedKey = try checkSignature(jws, alg: algorithm, keys: keySet)
                add("signature", true, "\(algorithm.rawValue) signature verifies")
            } catch {
                add("signature", false, "\(error)")
                fail(error)
            }
        } else {
            add("signature", nil, "not run: no key or algorithm")
        }
        let note = verifiedKey == nil ? " (not authenticated)" : ""
        do {
            try checkTokenType(jws.header)
            add("token-type", true, "typ \(jws.header.type.map { "\"\($0.excerpt(bytes: 32))\"" } ?? "absent") accepted" + note)
        } catch {
            add("token-type", false, error.description + note)
            fail(error)
        }
        let claims: IndexedJSONObject
        do {
            claims = try payloadClaims(jws)
        } catch {
            notRun(claimNames, "not run: the payload is not a JSON object")
            fail(error)
            return finished(.failure(firstError ?? error))
        }
        let payloadNote = verifiedKey == nil ? " (payload not authenticated)" : ""
        let reader = ClaimsReader(claims: claims)
        func run(_ name: String, _ body: () throws(VerificationError) -> String) {
            do {
                add(name, true, try body() + payloadNote)
            } catch {
                add(name, false, error.description + payloadNote)
            }
        }
        var tenantID: String? = nil
        run("issuer") { () throws(VerificationError) -> String in
            let (issuer, tid) = try checkIssuer(reader, key: verifiedKey)
            tenantID = tid
            return "\(issuer)"
        }
        run("audience") { () throws(VerificationError) -> String in "matches \(try checkAudience(reader))" }
        run("authorized-party") { () throws(VerificationError) -> String in
            try checkAuthorizedParty(reader)
            return (try reader.string(.azp)).map { "azp \($0.excerpt(bytes: 128)) allowed" } ?? "no azp"
        }
        if policy.tenants == nil {
            add("tenant", nil, "does not apply to \(policy.kind.rawValue)")
        } else {
            run("tenant") { () throws(VerificationError) -> String in
                try checkTenant(tenantID)
                return "tenant \(tenantID ?? "unknown") allowed"
            }
        }
        run("expiry") { () throws(VerificationError) -> String in
            let exp = try checkExpiry(reader, now: now)
            return "expires in \(exp - now) s (leeway \(policy.leewaySeconds) s)"
        }
        run("not-before") { () throws(VerificationError) -> String in
            try checkNotBefore(reader, now: now)
            return (try reader.numericDate(.nbf)).map { "valid since \(now - $0) s" } ?? "no nbf"
        }
        run("issued-at") { () throws(VerificationError) -> String in
            let iat = try checkIssuedAt(reader, key: verifiedKey, now: now)
            return iat.map { "issued \(now - $0) s ago" } ?? "no iat"
        }
        run("nonce") { () throws(VerificationError) -> String in
            try checkNonce(claimed: try reader.string(.nonce), requested: nonce)
            return nonce == nil ? "no nonce required" : "matches (\(policy.nonceMode.rawValue))"
        }
        if let firstError { return finished(.failure(firstError)) }
        guard let verifiedKey else { return finished(.failure(VerificationError(.invalidSignature, "the signature was not verified"))) }
        // Every check above passed on an authenticated payload: the verdict is what verify's claim checks give
        // (they run again here, without any signature work).
        do {
            let verdict = try checkClaims(claims, key: verifiedKey, nonce: nonce, now: now)
            if !historical, let keySet {
                remember(token, verdict: verdict, key: verifiedKey, keys: keySet, keyID: jws.header.keyID, nonce: nonce, now: now)
            }
            return finished(.success(verdict))
        } catch {
            return finished(.failure(error))
        }
    }

    /// The explanation alone (the CLI's `inspect`-style uses); the verdict comes from the same pass.
    public func explain(token: String, nonce: String?, at now: Int64, historical: Bool = false) -> Explanation {
        verifyExplaining(token: token, nonce: nonce, at: now, historical: historical).explanation
    }
}
