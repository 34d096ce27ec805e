// `leakloop N [RSA-PEM RSA-PEM]`: N rounds of accepted and rejected verifications for every algorithm, with key sets
// parsed (and freed) every round, so that valgrind sees every OpenSSL object the verification path creates
// (scripts/leak-check.sh). A small target of its own so the valgrind build stays quick. The two RSA keys come as PEM
// files when given: generating 2048-bit keys under valgrind takes half a minute, and the PEM loader gets checked too.
import Foundation
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

let arguments = Array(CommandLine.arguments.dropFirst())
let rounds = arguments.first.flatMap(Int.init) ?? 100
let pemFiles = Array(arguments.dropFirst())
let now = Verifiers.now
let nonce = "leak-raw-nonce"

/// The RSA key `index` of the command line, loaded from its PEM file, or a new one when none was given.
func rsaKey(_ index: Int, keyID: String, algorithm: SignatureAlgorithm) throws -> TestKey {
    guard index < pemFiles.count else { return try TestKey(.rsa(bits: 2048), keyID: keyID, algorithm: algorithm) }
    let pem = try String(contentsOfFile: pemFiles[index], encoding: .utf8)
    return TestKey(signingKey: try SigningKey(pem: pem), keyID: keyID, algorithm: algorithm)
}

let cases: [(TestKey, ProviderPolicy)] = try [
    (rsaKey(0, keyID: "rs", algorithm: .rs256), Verifiers.apple()),
    (
        rsaKey(1, keyID: "ps", algorithm: .ps256),
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
    // The PEM loader's BIO and key, made and freed every tenth round.
    if let file = pemFiles.first, round % 10 == 0 { _ = try SigningKey(pem: try String(contentsOfFile: file, encoding: .utf8)) }
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
