import ArgumentParser
import Foundation
import Logging
import TokenGuardCore
import TokenGuardService

struct RevokeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Record that a subject's tokens issued at or before a time are revoked (or, with --delete, remove the record).",
        discussion: """
            Writes the store the config names (revocations.store: the SQLite file beside the key archive, or Redis); \
            running servers apply it within revocations.max_staleness_seconds. Exit status: 0 recorded, 2 usage or \
            config error (or the answer could not be written: the change is saved, and the message says so), 3 the \
            store cannot be written now.
            """
    )

    @Option(name: .long, help: "Config file (YAML or JSON). Default: $TOKENGUARD_CONFIG.")
    var config: String?

    @Option(name: .long, help: "The configured provider.")
    var provider: String

    @Option(name: .long, help: "The subject (the verdict's user_id or subject).")
    var subject: String

    @Option(name: .customLong("not-before"), help: "Unix seconds: tokens issued at or before this are revoked (default now).")
    var notBefore: Int64?

    @Flag(name: .long, help: "Remove the subject's revocation instead.")
    var delete = false

    func run() async throws {
        Logs.bootstrap(format: ProcessInfo.processInfo.environment["TOKENGUARD_LOG_FORMAT"], defaultLevel: .warning)
        let configuration: Configuration
        do {
            configuration = try Configuration.load(path: config)
        } catch {
            Stderr.write("tokenguard: config error: \(error)\n")
            throw ExitCodes.usage
        }
        guard let configured = configuration.providers.first(where: { $0.name.sameBytes(as: provider) })?.name else {
            Stderr.write("tokenguard: no provider named \"\(provider.excerpt(bytes: 64))\" is configured\n")
            throw ExitCodes.usage
        }
        guard Revocation.isValidSubject(subject) else {
            Stderr.write("tokenguard: --subject must be 1 to \(Revocation.maximumSubjectBytes) bytes, without NUL\n")
            throw ExitCodes.usage
        }
        let notBefore = self.notBefore ?? Int64(Date().timeIntervalSince1970)
        guard notBefore >= 0, notBefore <= NumericDate.maximum else {
            Stderr.write("tokenguard: --not-before must be Unix seconds\n")
            throw ExitCodes.usage
        }
        let revocations = try ConfigLoading.makeRevocations(configuration)
        let logger = Logger(label: "tokenguard.revocations")
        try Stdout.requireOpen()  // before the store changes: refuse a change whose answer would be lost
        let answer: String
        do {
            if delete {
                let removed = try await revocations.store.delete(provider: configured, subject: subject)
                logger.notice("revocation removed", metadata: ["provider": "\(configured)", "subject_sha256": "\(TokenHash.short(subject))"])
                answer = JSONWriter.string(.object(JSONObject([("provider", .string(configured)), ("removed", .bool(removed))])))
            } else {
                try await revocations.store.put(Revocation(provider: configured, subject: subject, notBefore: notBefore))
                logger.notice(
                    "revocation recorded",
                    metadata: [
                        "provider": "\(configured)", "subject_sha256": "\(TokenHash.short(subject))", "not_before": "\(notBefore)", "by": "cli",
                    ])
                answer = JSONWriter.string(
                    .object(JSONObject([("provider", .string(configured)), ("subject", .string(subject)), ("not_before", .integer(notBefore))])))
            }
        } catch {
            Stderr.write("tokenguard: the revocation store cannot be written: \(error)\n")
            throw ExitCodes.unavailable
        }
        do {
            try Stdout.answer(answer)
        } catch {
            Stderr.write("tokenguard: the change is saved in the store; only its answer could not be written\n")
            throw error
        }
    }
}
