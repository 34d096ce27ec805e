import Foundation
import TokenGuardTestSupport

/// Long-running checks of the real server, on loopback only (scripts/soak.sh, scripts/abuse.sh):
///
///   stress soak [SECONDS] [--json FILE]    valid, expired, forged and malformed tokens while the IdP rotates
///                                          keys, fails, goes slow and comes back; every verdict checked
///   stress abuse [SECONDS] [--json FILE]   slow bodies, idle connections, maximal batches, nested JSON, each
///                                          with the p99 of a well-behaved client alongside
///   stress fleet [SECONDS] [--json FILE]   the fleet scenarios, SECONDS each (run by scripts/fleet-test.sh, which
///                                          builds the network namespaces)
///
/// Exit status 0 when every check held, 1 when one did not, 2 on a usage or setup error.

signal(SIGPIPE, SIG_IGN)
var arguments = Array(CommandLine.arguments.dropFirst())
var jsonPath: String? = nil
if let index = arguments.firstIndex(of: "--json"), index + 1 < arguments.count {
    jsonPath = arguments[index + 1]
    arguments.removeSubrange(index...(index + 1))
}
let mode = arguments.first ?? ""
let seconds = arguments.count > 1 ? Double(arguments[1]) : nil
do {
    let report: StressReport
    switch mode {
    case "soak": report = try await Soak.run(seconds: seconds ?? 600)
    case "abuse": report = try await Abuse.run(secondsPerScenario: seconds ?? 15)
    case "fleet": report = try await Fleet.run(secondsPerScenario: seconds ?? 10)
    default:
        say(
            "usage: stress soak [SECONDS] [--json FILE] | stress abuse [SECONDS_PER_SCENARIO] [--json FILE] | stress fleet [SECONDS_PER_SCENARIO] [--json FILE]"
        )
        exit(2)
    }
    if let jsonPath { try Data(report.json.utf8).write(to: URL(fileURLWithPath: jsonPath)) }
    say(report.passed ? "\(mode): PASSED" : "\(mode): FAILED — \(report.failures.joined(separator: "; "))")
    exit(report.passed ? 0 : 1)
} catch {
    say("\(mode): setup failed: \(error)")
    exit(2)
}
