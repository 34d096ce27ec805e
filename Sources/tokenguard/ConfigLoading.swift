import ArgumentParser
import Dispatch
import Foundation
import Logging
import TokenGuardCore
import TokenGuardFetch

enum ConfigLoading {
    /// Loads the config and builds the verifiers (with the libcurl fetcher and the key archive when any provider
    /// fetches its keys), or prints the problem, naming the key, and exits 2.
    static func registry(path: String?) throws -> (Configuration, VerifierRegistry) {
        Logs.bootstrap()
        let configuration: Configuration
        do {
            configuration = try Configuration.load(path: path)
        } catch {
            Stderr.write("tokenguard: config error: \(error)\n")
            throw ExitCodes.usage
        }
        guard VerifierRegistry.needsFetcher(configuration) else { return (configuration, VerifierRegistry(configuration: configuration)) }
        var http = CurlHTTPClient.Configuration()
        http.connectTimeoutMilliseconds = configuration.connectTimeoutMilliseconds
        http.totalTimeoutMilliseconds = configuration.totalTimeoutMilliseconds
        var archive: KeyArchive? = nil
        do {
            archive = try KeyArchive(path: configuration.keyArchive)
        } catch {
            // Reported, not fatal: verification goes on with keys in memory.
            Logger(label: "tokenguard").error(
                "cannot open the key archive; continuing without it", metadata: ["path": "\(configuration.keyArchive)", "error": "\(error)"])
        }
        return (configuration, VerifierRegistry(configuration: configuration, fetcher: CurlHTTPClient(configuration: http), archive: archive))
    }
}

enum Stderr {
    static func write(_ text: String) { FileHandle.standardError.write(Data(text.utf8)) }
}

enum Logs {
    private static let once: Void = {
        let level = ProcessInfo.processInfo.environment["TOKENGUARD_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }()

    /// Logs go to standard error (warnings and worse unless TOKENGUARD_LOG_LEVEL says otherwise).
    static func bootstrap() { once }
}

/// Runs async work from a synchronous command and waits for it. Only for the CLI's top level.
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let semaphore = DispatchSemaphore(value: 0)
    let box = ResultBox<T>()
    Task {
        box.value = await body()
        semaphore.signal()
    }
    semaphore.wait()
    guard let value = box.value else { preconditionFailure("runBlocking: no value") }
    return value
}

/// Carries a value from a task to the thread waiting on the semaphore; the semaphore orders the accesses.
final class ResultBox<T>: @unchecked Sendable {
    var value: T?
}
