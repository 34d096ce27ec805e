import ArgumentParser
import Foundation
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService

struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "List each provider's keys: fetched now (the cache) and every version in the key archive."
    )

    @Option(name: .long, help: "Config file (YAML or JSON). Default: $TOKENGUARD_CONFIG.")
    var config: String?

    func run() async throws {
        let (configuration, registry) = try ConfigLoading.registry(path: config)
        await registry.prepare()
        let archive = configuration.keyArchive.isEmpty ? nil : try? KeyArchive(path: configuration.keyArchive)
        var providers: [JSONValue] = []
        for name in registry.providerNames {
            var entry = JSONObject([("name", .string(name))])
            guard let verifier = registry.verifiers[name] else {
                entry.set("kind", .string("opaque"))
                providers.append(.object(entry))
                continue
            }
            let status = verifier.keySource.status
            entry.set("usable", .bool(status.usable))
            entry.set("last_error", status.lastError.map(JSONValue.string) ?? .null)
            entry.set("skipped_keys", status.skippedKeys.json)
            if case .success(let keys) = verifier.keySource.currentKeys() {
                entry.set(
                    "cached",
                    .array(
                        keys.keys.map { key in
                            .object(
                                JSONObject([
                                    ("kid", key.keyID.map(JSONValue.string) ?? .null), ("type", .string("\(key.publicKey.keyType)")),
                                    ("bits", .integer(Int64(key.publicKey.bits))), ("alg", key.algorithm.map { .string($0.rawValue) } ?? .null),
                                    ("thumbprint", .string(key.thumbprint)),
                                ]))
                        }))
            }
            if let entries = try? archive?.entries(provider: name, source: nil) {
                entry.set(
                    "archived",
                    .array(
                        entries.map {
                            .object(
                                JSONObject([
                                    ("kid", .string($0.keyID)), ("thumbprint", .string($0.thumbprint)), ("source", .string($0.source)),
                                    ("first_seen", .integer($0.firstSeen)),
                                    ("last_seen", .integer($0.lastSeen)),
                                ]))
                        }))
            }
            providers.append(.object(entry))
        }
        try Stdout.answer(JSONWriter.string(.object(JSONObject([("providers", .array(providers))]))))
    }
}
