// tokenguard's benchmark: `swift run -c release bench [--quick] [--json FILE]`.
//
// Measures, in one run and on identical tokens: the raw OpenSSL verify rate (the limit), tokenguard's full
// verification per algorithm, libjwt on the same tokens, and the cost of rejecting malformed tokens. Prints a
// table with ratios; targets are reported as ratios, never asserted. `--leak-loop N` instead runs N rounds of
// accepted and rejected verifications (for valgrind; see scripts/leak-check.sh).
import Foundation
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

let arguments = CommandLine.arguments.dropFirst()
func option(_ name: String) -> String? {
    guard let index = arguments.firstIndex(of: name), arguments.index(after: index) < arguments.endIndex else { return nil }
    return arguments[arguments.index(after: index)]
}

do {
    if let rounds = option("--leak-loop").flatMap(Int.init) {
        try LeakLoop.run(rounds: rounds)
    } else {
        let quick = arguments.contains("--quick")
        let report = try Bench(secondsPerCase: quick ? 0.15 : 1.0).run()
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
