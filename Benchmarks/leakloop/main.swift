// `leakloop N`: N rounds of accepted and rejected verifications for every algorithm, with key sets parsed (and
// freed) every round, so that valgrind sees every OpenSSL object the verification path creates
// (scripts/leak-check.sh). A small target of its own so the valgrind build stays quick.
import Foundation
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

let rounds = CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 100
let now = Verifiers.now
let nonce = "leak-raw-nonce"
let cases: [(TestKey, ProviderPolicy)] = try [
    (TestKey(.rsa(bits: 2048), keyID: "rs", algorithm: .rs256), Verifiers.apple()),
    (
        TestKey(.rsa(bits: 2048), keyID: "ps", algorithm: .ps256),
        {
            var p = Verifiers.apple()
            p.algorithms = [.ps256]
            return p
        }()
    ),
    (
        TestKey(.ec(.p256), keyID: "es"),
        {
            var p = Verifiers.apple()
            p.algorithms = [.es256]
            return p
        }()
    ),
    (
        TestKey(.ed25519, keyID: "ed"),
        {
            var p = Verifiers.apple()
            p.algorithms = [.edDSA]
            return p
        }()
    ),
]
var accepted = 0
var rejected = 0
for round in 0..<rounds {
    for (key, policy) in cases {
        let jwks = try SharedTestKeys.jwks([key])
        let verifier = TokenVerifier(policy: policy, keySource: try InMemoryKeySource(jwks: jwks), cache: VerifiedTokenCache(capacity: 8))
        let token = try key.sign(ProviderTokens.apple(now: now, rawNonce: nonce))
        let parts = segments(token)
        for candidate in [token, token, "\(parts[0]).\(parts[1]).", "\(parts[1]).\(parts[0]).\(parts[2])", "x", String(token.dropLast(2))] {
            switch verifier.verify(token: candidate, nonce: round % 2 == 0 ? nonce : "wrong", at: now) {
            case .success: accepted += 1
            case .failure: rejected += 1
            }
        }
    }
}
print("leak loop: \(rounds) rounds, \(accepted) accepted, \(rejected) rejected")
