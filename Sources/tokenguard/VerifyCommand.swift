import ArgumentParser
import Foundation
import TokenGuardCore
import TokenGuardService

struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify one token and print its verdict as JSON.",
        discussion: "Exit status: 0 valid, 1 rejected, 2 usage or config error, 3 keys unavailable (retry later)."
    )

    @OptionGroup var options: CommonOptions

    @Option(name: .long, help: "The provider's key in the config.")
    var provider: String

    // Unconditional: the next argument is the value even when it starts with '-' (a token refused as what it is, a
    // random nonce that happens to start with the base64url '-'), never taken for an option. `VerifyArguments` has
    // already joined each to its value (`--nonce=VALUE`), so that ArgumentParser's scans for its own flags (help,
    // completion script) never read a value as one, and refused any option given twice.
    @Option(name: .long, parsing: .unconditional, help: "The token; '-' reads it from standard input (keeps it out of the process list).")
    var token: String

    @Option(name: .long, parsing: .unconditional, help: "The raw nonce the app generated for this sign-in.")
    var nonce: String?

    @Flag(name: .long, help: "Add every check with its outcome (\"checks\"), not only the first failure.")
    var explain = false

    func validate() throws {
        for (name, value) in [("--token", token), ("--nonce", nonce)] {
            // Only the option's name is echoed: what follows its '=' may be a token.
            if let value, let option = VerifyArguments.optionRead(in: value) {
                throw ValidationError("\(name) needs a value; what follows it reads as \(option), an option, not a value")
            }
        }
    }

    func run() async throws {
        let (_, registry) = try ConfigLoading.registry(path: options.config)
        var tokenText = token
        // A refusal decided here, before the registry: it sees only what arrived as text.
        var refusal: VerificationError? = nil
        if token == "-" {
            // Read no more than a token at the limit and the blanks a shell may add could need, and one byte more.
            let readLimit = registry.maxTokenBytes + 4096
            let bytes = Array(try FileHandle.standardInput.read(upToCount: readLimit + 1) ?? Data())
            if bytes.count > readLimit {
                refusal = VerificationError(
                    .tokenTooLarge, "standard input holds more than \(readLimit) bytes; the limit is \(registry.maxTokenBytes)")
            }
            // Only the ASCII line end and blanks a shell adds are trimmed; any other byte stays and is judged.
            let isBlank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
            let start = bytes.firstIndex { !isBlank($0) } ?? bytes.endIndex
            let end = (bytes.lastIndex { !isBlank($0) } ?? (start - 1)) + 1
            tokenText = String(decoding: bytes[start..<max(start, end)], as: UTF8.self)
        }
        guard !tokenText.isEmpty else { throw ValidationError("--token is empty") }
        if nonce?.isEmpty == true { throw ValidationError("--nonce is empty: a raw nonce is never empty") }
        // Arguments and standard input arrive as text, each byte that was not UTF-8 replaced by U+FFFD: a nonce given
        // with such a byte is not the one the app hashed (a nonce that really holds U+FFFD is read as given), and such a
        // token is refused for that byte, not for a size it was not sent at.
        if let nonce, LossyText.holdsReplacement(nonce.utf8), RawArguments.valueIsUTF8(of: "--nonce") != true {
            throw ValidationError("--nonce holds a byte that is not UTF-8 text")
        }
        if refusal == nil, tokenText.utf8.count > registry.maxTokenBytes, LossyText.holdsReplacement(tokenText.utf8) {
            refusal = VerificationError(.malformedToken, LossyText.tokenRefusal)
        }
        let (providerName, nonceText, at, explainFlag) = (provider, nonce, options.at, explain)
        let finalToken = tokenText
        let result: VerificationResult
        var explanation: Explanation? = nil
        if let refusal, registry.configuredName(providerName) != nil {
            result = .failure(refusal)
            if explainFlag { explanation = Explanation(checks: [Explanation.Check(name: "structure", ok: false, detail: refusal.description)]) }
        } else {
            // A one-shot command fetches the provider's keys first (archived keys remain the fallback).
            await registry.prepare(provider: providerName)
            (result, explanation) = await registry.verify(provider: providerName, token: finalToken, nonce: nonceText, at: at, explain: explainFlag)
        }
        var output = result.json(provider: provider)
        if let explanation { output.set("checks", explanation.json) }
        try Stdout.answer(JSONWriter.string(.object(output)))
        switch result {
        case .success: throw ExitCodes.valid
        case .failure(let error):
            switch error.code {
            case let code where code.isRetryable: throw ExitCodes.unavailable
            case .unknownProvider, .invalidRequest: throw ExitCodes.usage
            default: throw ExitCodes.rejected
            }
        }
    }
}
