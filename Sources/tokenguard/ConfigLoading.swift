import ArgumentParser
import Foundation
import TokenGuardCore

enum ConfigLoading {
    /// Loads the config and builds the verifiers, or prints the problem (naming the key) and exits 2.
    static func registry(path: String?) throws -> (Configuration, VerifierRegistry) {
        do {
            let configuration = try Configuration.load(path: path)
            return (configuration, VerifierRegistry(configuration: configuration))
        } catch {
            Stderr.write("tokenguard: config error: \(error)\n")
            throw ExitCodes.usage
        }
    }

    static func currentUnixTime() -> Int64 { Int64(Date().timeIntervalSince1970) }
}

enum Stderr {
    static func write(_ text: String) { FileHandle.standardError.write(Data(text.utf8)) }
}
