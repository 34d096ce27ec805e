import ArgumentParser
import Foundation
import TokenGuardCore

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify one token and print its verdict as JSON.",
        discussion: "Exit status: 0 valid, 1 rejected, 2 usage or config error, 3 keys unavailable (retry later)."
    )

    @OptionGroup var options: CommonOptions

    @Option(name: .long, help: "The provider's key in the config.")
    var provider: String

    @Option(name: .long, help: "The token; '-' reads it from standard input (keeps it out of the process list).")
    var token: String

    @Option(name: .long, help: "The raw nonce the app generated for this sign-in.")
    var nonce: String?

    @Flag(name: .long, help: "Add every check with its outcome (\"checks\"), not only the first failure.")
    var explain = false

    func run() throws {
        let (_, registry) = try ConfigLoading.registry(path: options.config)
        var tokenText = token
        if token == "-" {
            let data = FileHandle.standardInput.readDataToEndOfFile()
            tokenText = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        guard !tokenText.isEmpty else { throw ValidationError("--token is empty") }
        let (providerName, nonceText, at) = (provider, nonce, options.at)
        let finalToken = tokenText
        let result = runBlocking {
            // A one-shot command fetches the provider's keys first (archived keys remain the fallback).
            await registry.prepare(provider: providerName)
            return await registry.verify(provider: providerName, token: finalToken, nonce: nonceText, at: at)
        }
        var output = result.json(provider: provider)
        if explain, let verifier = registry.verifiers[provider] {
            let time = at ?? VerifierRegistry.systemClock()
            output.set("checks", verifier.explain(token: finalToken, nonce: nonceText, at: time, historical: at != nil).json)
        }
        print(JSONWriter.string(.object(output)))
        switch result {
        case .success: throw ExitCodes.valid
        case .failure(let error):
            switch error.code {
            case .keysUnavailable, .replayStoreUnavailable: throw ExitCodes.unavailable
            case .unknownProvider, .invalidRequest: throw ExitCodes.usage
            default: throw ExitCodes.rejected
            }
        }
    }
}
