import ArgumentParser
import Foundation
import TokenGuardCrypto
import TokenGuardService

@main
struct TokenGuardCommand: AsyncParsableCommand {
    static let version = TokenGuardVersion.string

    static let configuration = CommandConfiguration(
        commandName: "tokenguard",
        abstract: "Verify sign-in tokens from Apple, Facebook and Microsoft before minting a session.",
        version: version,
        subcommands: [
            ServeCommand.self, VerifyCommand.self, BatchCommand.self, InspectCommand.self, KeysCommand.self, DevIdPCommand.self, MintCommand.self,
            HealthcheckCommand.self, RevokeCommand.self,
        ]
    )

    /// Parses and runs, mapping every usage error to exit 2 as the contract requires (ArgumentParser's own
    /// validation exit code is EX_USAGE, 64).
    static func main() async {
        StandardStreams.reserve()
        // A reader that goes away (standard output or error a pipe whose other end closed) is a write error, never a
        // death by SIGPIPE: `serve` drops the log lines and goes on answering, `batch` stops with exit 2 ("write
        // failed"), and no command loses its exit status to a closed diagnostics pipe.
        signal(SIGPIPE, SIG_IGN)
        OpenSSLRuntime.keepStateUntilExit()
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            var command = try parseAsRoot(try VerifyArguments.prepare(arguments))
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let exitCode as ExitCode {
            // The answer is printed; leave without running exit-time handlers while worker threads may still run.
            fflush(nil)  // every output stream
            _exit(exitCode.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .success {  // --help, --version: an answer like any other, and checked like one
                do {
                    try Stdout.answer(fullMessage(for: error))
                } catch {
                    Foundation.exit(ExitCodes.usage.rawValue)
                }
                // verify's exit status 0 means "valid" and nothing else: its help and version end as usage (red team
                // round 16: a caller passing arguments on got 0 for `-h`).
                Foundation.exit(arguments.first.map { $0.utf8.elementsEqual("verify".utf8) } == true ? ExitCodes.usage.rawValue : 0)
            }
            Stderr.write(fullMessage(for: error) + "\n")
            Foundation.exit(ExitCodes.usage.rawValue)
        }
    }
}

/// Options every verifying command shares.
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: "Config file (YAML or JSON). Default: $TOKENGUARD_CONFIG.")
    var config: String?

    @Option(name: .long, help: "Verify as of this Unix time (for logged tokens) instead of now.")
    var at: Int64?

    func validate() throws {
        if let at, at < 0 || at > 253_402_300_799 { throw ValidationError("--at must be Unix seconds between 0 and 253402300799") }
    }
}
