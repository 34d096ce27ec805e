import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// Accepted and rejected verifications in a loop, with key sets parsed (and freed) every round, so that
/// valgrind sees every OpenSSL object the verification path creates.
enum LeakLoop {
    static func run(rounds: Int) throws {
        let fixtures = try Fixture.all()
        var accepted = 0
        var rejected = 0
        for round in 0..<rounds {
            for fixture in fixtures {
                let jwks = try SharedTestKeys.jwks([fixture.key])
                let verifier = TokenVerifier(policy: fixture.verifier.policy, keySource: try InMemoryKeySource(jwks: jwks))
                let parts = segments(fixture.token)
                let candidates = [
                    fixture.token, "\(parts[0]).\(parts[1]).", "\(parts[1]).\(parts[0]).\(parts[2])", "x", String(fixture.token.dropLast(2)),
                ]
                for token in candidates {
                    switch fixture.verifier.verify(token: token, nonce: round % 2 == 0 ? fixture.nonce : "wrong", at: fixture.now) {
                    case .success: accepted += 1
                    case .failure: rejected += 1
                    }
                    _ = verifier.verify(token: token, nonce: fixture.nonce, at: fixture.now)
                }
            }
        }
        print("leak loop: \(rounds) rounds, \(accepted) accepted, \(rejected) rejected")
    }
}
