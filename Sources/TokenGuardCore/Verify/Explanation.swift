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

    public var json: JSONValue { .array(checks.map { .object($0.json) }) }
}

extension TokenVerifier {
    /// Runs every check independently and reports each. The verdict itself always comes from ``verify``;
    /// claims are judged here even when the signature fails, marked as unauthenticated.
    public func explain(token: String, nonce: String?, at now: Int64, historical: Bool = false) -> Explanation {
        var checks: [Explanation.Check] = []
        func add(_ name: String, _ ok: Bool?, _ detail: String) { checks.append(Explanation.Check(name: name, ok: ok, detail: detail)) }
        func notRun(_ names: [String], _ why: String) { for name in names { add(name, nil, why) } }
        let claimNames = ["issuer", "audience", "tenant", "expiry", "not-before", "issued-at", "nonce"]

        let jws: CompactJWS
        do {
            jws = try parse(token)
            add("structure", true, "compact JWS, \(token.utf8.count) bytes, header \(jws.header.ignoredKeyReferences.isEmpty ? "ok" : "ok (ignored: \(jws.header.ignoredKeyReferences.joined(separator: ", ")))")")
        } catch {
            add("structure", false, "\(error)")
            notRun(["algorithm", "key", "signature"] + claimNames, "not run: the token could not be parsed")
            add("replay", nil, "replay protection is not enabled")
            return Explanation(checks: checks)
        }
        var algorithm: SignatureAlgorithm? = nil
        do {
            algorithm = try checkAlgorithm(jws.header)
            add("algorithm", true, "\(jws.header.algorithm) is allowed for \(policy.name)")
        } catch {
            add("algorithm", false, "\(error)")
        }
        var key: VerificationKey? = nil
        switch historical ? keySource.historicalKeys() : keySource.currentKeys() {
        case .failure(let error):
            add("key", false, error.description)
        case .success(let keys):
            if let algorithm {
                let candidates = keys.candidates(keyID: jws.header.keyID, algorithm: algorithm).filter { $0.permits(algorithm) }
                key = candidates.first
                add("key", key != nil, key.map { "kid \"\(($0.keyID ?? "").prefix(64))\": \($0.publicKey.keyType), \($0.publicKey.bits) bits" }
                    ?? "no usable key for kid \"\((jws.header.keyID ?? "none").prefix(64))\"")
            } else {
                add("key", nil, "not run: no acceptable algorithm")
            }
        }
        var authenticated = false
        if let algorithm, (try? keySource.currentKeys().get()) != nil || historical {
            do {
                let verifiedKey = try checkSignature(jws, alg: algorithm, keys: try (historical ? keySource.historicalKeys() : keySource.currentKeys()).get())
                key = verifiedKey
                authenticated = true
                add("signature", true, "\(algorithm.rawValue) signature verifies")
            } catch {
                add("signature", false, "\(error)")
            }
        } else {
            add("signature", nil, "not run: no key or algorithm")
        }
        guard let claims = try? JSONParser.parseObject(jws.payload) else {
            notRun(claimNames, "not run: the payload is not a JSON object")
            add("replay", nil, "replay protection is not enabled")
            return Explanation(checks: checks)
        }
        let note = authenticated ? "" : " (payload not authenticated)"
        let reader = ClaimsReader(claims: claims)
        func run(_ name: String, _ body: () throws(VerificationError) -> String) {
            do {
                add(name, true, try body() + note)
            } catch {
                add(name, false, error.description + note)
            }
        }
        var tenantID: String? = nil
        run("issuer") { () throws(VerificationError) -> String in
            let (issuer, tid) = try checkIssuer(reader, key: key)
            tenantID = tid
            return "\(issuer)"
        }
        run("audience") { () throws(VerificationError) -> String in "matches \(try checkAudience(reader))" }
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
            return (try reader.numericDate("nbf")).map { "valid since \(now - $0) s" } ?? "no nbf"
        }
        run("issued-at") { () throws(VerificationError) -> String in
            let iat = try checkIssuedAt(reader, key: key, now: now)
            return iat.map { "issued \(now - $0) s ago" } ?? "no iat"
        }
        run("nonce") { () throws(VerificationError) -> String in
            try checkNonce(claimed: try reader.string("nonce"), requested: nonce)
            return nonce == nil ? "no nonce required" : "matches (\(policy.nonceMode.rawValue))"
        }
        add("replay", nil, "replay protection is not enabled")
        return Explanation(checks: checks)
    }
}
