import TokenGuardCrypto
import TokenGuardService

@testable import TokenGuardCore

/// The claims reader and every provider's claim checks, on an arbitrary payload (the signature is taken as
/// verified, so the fuzzer reaches every claim rule without forging signatures).
///
/// Properties: nothing traps; an accepted payload is unexpired, not before its `nbf` or `iat`, names a
/// configured audience and the policy's issuer, has a non-empty subject, and carries the nonce that was asked
/// for; checking twice gives the same outcome.
enum ClaimsFuzzTarget {
    static let target = FuzzTarget(name: "claims", summary: "claims reader and provider claim checks on arbitrary payloads") { bytes in
        guard let claims = try? IndexedJSONObject(bytes) else { return }
        let reader = ClaimsReader(claims: claims)
        for name in claims.materialized().names.prefix(16) { _ = try? reader.string(name) }
        for claim in ClaimName.allCases {
            _ = try? reader.numericDate(claim)
            _ = try? reader.string(claim)
        }
        _ = try? reader.audiences()
        _ = try? reader.emailVerified()
        let nonce = FuzzFixtures.nonces[bytes.count % FuzzFixtures.nonces.count]
        for (name, verifier) in FuzzFixtures.verifiers {
            guard case .success(let keys) = verifier.keySource.currentKeys(), let key = keys.keys.first else { continue }
            let outcome = Result { () throws(VerificationError) -> Verdict in
                try verifier.checkClaims(claims, key: key, nonce: nonce, now: FuzzFixtures.now)
            }
            let again = Result { () throws(VerificationError) -> Verdict in
                try verifier.checkClaims(claims, key: key, nonce: nonce, now: FuzzFixtures.now)
            }
            switch (outcome, again) {
            case (.success(let verdict), .success):
                checkAccepted(verdict, claims, verifier.policy, nonce: nonce)
            case (.failure(let error), .failure(let second)):
                require(error.code == second.code, "\(name): \(error.code) then \(second.code)")
            default:
                fatalError("\(name): the same claims accepted once and rejected once")
            }
        }
    }

    static func checkAccepted(_ verdict: Verdict, _ claims: IndexedJSONObject, _ policy: ProviderPolicy, nonce: String?) {
        let now = FuzzFixtures.now
        let leeway = policy.leewaySeconds
        guard let expiresAt = verdict.expiresAt else { fatalError("\(policy.name): accepted without exp") }
        require(now < expiresAt + leeway, "\(policy.name): accepted expired claims")
        if case .integer(let nbf)? = claims["nbf"] { require(nbf <= now + leeway, "\(policy.name): accepted before nbf") }
        if let issuedAt = verdict.issuedAt { require(issuedAt <= now + leeway, "\(policy.name): accepted iat in the future") }
        require(policy.audiences.contains(verdict.audience), "\(policy.name): accepted audience \(verdict.audience)")
        require(!verdict.subject.isEmpty, "\(policy.name): accepted an empty subject")
        switch policy.issuers {
        case .exact(let accepted): require(accepted.contains(verdict.issuer), "\(policy.name): accepted issuer \(verdict.issuer)")
        case .tenantTemplate(let template):
            guard let tid = verdict.tenantID else { fatalError("\(policy.name): accepted without a tenant") }
            require(verdict.issuer == template.replacingTenantID(with: tid), "\(policy.name): issuer does not match tenant")
        }
        if let nonce {
            let claimed = claims["nonce"]?.stringValue
            let expected = policy.nonceMode == .sha256 ? SHA256.hexDigest(nonce.utf8) : nonce
            require(claimed == expected, "\(policy.name): accepted with a nonce that does not match")
        } else {
            require(!policy.nonceRequired, "\(policy.name): accepted without the required nonce")
        }
    }
}
