// tokenguard's benchmark: `swift run -c release bench [--quick] [--json FILE]`.
//
// In one run, on identical tokens: the raw OpenSSL verify rate (the limit); tokenguard's full verification per
// algorithm on one thread and on every core; jwt-kit and libjwt on the same tokens; verified-token cache hits;
// rejection costs; the real HTTP server under load; the batch pipeline's throughput and peak memory.
// Targets are printed as ratios beside the figures, never asserted. `--profile ALG[-cached] [--iterations N]` runs a bare
// verification loop for `perf record`. (The valgrind loop is the `leakloop` target.)
import Foundation
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

let arguments = Array(CommandLine.arguments.dropFirst())
func option(_ name: String) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

do {
    if let name = option("--profile"), let fixture = try Fixture.all().first(where: { $0.name == name.replacingOccurrences(of: "-cached", with: "") })
    {
        // A bare verification loop for `perf record` (`RS256-cached`: verified-token cache hits).
        let verifier =
            name.hasSuffix("-cached")
            ? TokenVerifier(policy: fixture.verifier.policy, keySource: fixture.verifier.keySource, cache: VerifiedTokenCache()) : fixture.verifier
        var valid = 0
        for _ in 0..<(option("--iterations").flatMap(Int.init) ?? 200_000) {
            if case .success = verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now) { valid += 1 }
        }
        print("profile loop: \(valid) valid")
    } else if let config = option("--serve-child"), let port = arguments.last.flatMap(Int.init) {
        try await Children.serve(config: config, port: port)
    } else if let pem = option("--jwtkit-serve-child") {
        let rest = Array(arguments.drop { $0 != "--jwtkit-serve-child" }.dropFirst(2))
        guard rest.count == 4, let port = Int(rest[3]) else { throw RunnerError("--jwtkit-serve-child PEM KID ISSUER AUDIENCE PORT") }
        try await JWTKitServer.serve(pemPath: pem, keyID: rest[0], issuer: rest[1], audience: rest[2], port: port)
    } else if let config = option("--batch-child") {
        try await Children.batch(config: config)
    } else {
        let report = try await Bench(quick: arguments.contains("--quick")).run()
        print(report.table())
        if let path = option("--json") {
            try report.json().write(toFile: path, atomically: true, encoding: .utf8)
            print("wrote \(path)")
        }
    }
} catch {
    FileHandle.standardError.write(Data("bench: \(error)\n".utf8))
    exit(1)
}
