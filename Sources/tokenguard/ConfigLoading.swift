import ArgumentParser
import Dispatch
import Foundation
import Logging
import TokenGuardBatch
import TokenGuardCore
import TokenGuardFetch
import TokenGuardRedis
import TokenGuardService

enum ConfigLoading {
    /// Loads the config and builds the verifiers, or prints the problem (naming the key) and exits 2.
    static func registry(path: String?) throws -> (Configuration, VerifierRegistry) {
        Logs.bootstrap(format: ProcessInfo.processInfo.environment["TOKENGUARD_LOG_FORMAT"], defaultLevel: .warning)
        let configuration: Configuration
        do {
            configuration = try Configuration.load(path: path)
        } catch {
            Stderr.write("tokenguard: config error: \(error)\n")
            throw ExitCodes.usage
        }
        return (configuration, try makeRegistry(configuration, logger: Logger(label: "tokenguard")))
    }

    /// The verifiers for a configuration, with the libcurl client and the key archive when anything is fetched.
    /// An archive that cannot be opened is reported and left out: verification goes on with keys in memory.
    static func makeRegistry(_ configuration: Configuration, logger: Logger) throws -> VerifierRegistry {
        var replayStore: (any ReplayStore)? = nil
        if case .redis(let url)? = configuration.replay?.store {
            replayStore = RedisReplayStore(endpoint: try redisEndpoint(configuration, url: url))
        }
        let revocations = try makeRevocations(configuration)
        guard VerifierRegistry.needsFetcher(configuration) else {
            return VerifierRegistry(configuration: configuration, replayStore: replayStore, revocations: revocations)
        }
        var http = CurlHTTPClient.Configuration()
        http.connectTimeoutMilliseconds = configuration.connectTimeoutMilliseconds
        http.totalTimeoutMilliseconds = configuration.totalTimeoutMilliseconds
        if let extra = configuration.extraCAFile { http.caBundlePath = try combinedCABundle(extra) }
        var archive: KeyArchive? = nil
        if !configuration.keyArchive.isEmpty {
            do {
                archive = try KeyArchive(path: configuration.keyArchive)
            } catch {
                logger.error(
                    "cannot open the key archive; continuing without it", metadata: ["path": "\(configuration.keyArchive)", "error": "\(error)"])
            }
        }
        // A client (a pool of threads) per provider and upstream, made for the calls the provider makes: an upstream
        // that hangs, at worst for the outbound timeout, then holds up only its own calls (red team: a hanging inspection
        // API with 16 clients kept another provider's key fetch waiting 13.5 s).
        var clients: [String: CurlHTTPClient] = [:]
        return VerifierRegistry(
            configuration: configuration,
            fetchers: { provider, purpose in
                let key = "\(provider)\u{0}\(purpose.rawValue)"
                if let client = clients[key] { return client }
                var settings = http
                settings.threads = purpose.threads
                let client = CurlHTTPClient(configuration: settings)
                clients[key] = client
                return client
            }, archive: archive, replayStore: replayStore, revocations: revocations)
    }

    /// The Redis endpoint for `url` with the `redis:` block's password, Sentinels and master name (when `url` is that
    /// block's): the password is read from its variable once, or from its file at every new connection.
    static func redisEndpoint(_ configuration: Configuration, url: String) throws -> RedisEndpoint {
        var endpoint: RedisEndpoint
        do {
            endpoint = try RedisEndpoint.parse(url)
        } catch {
            Stderr.write("tokenguard: config error: redis: \(error)\n")
            throw ExitCodes.usage
        }
        guard let settings = configuration.redis, settings.url == url else { return endpoint }
        endpoint.password = try secretReader(settings.password, key: "redis.password_file")
        endpoint.sentinelPassword = try secretReader(settings.sentinelPassword, key: "redis.sentinel_password_file")
        endpoint.sentinels = settings.sentinels
        endpoint.masterName = settings.masterName
        return endpoint
    }

    /// A Redis password as a reader: the variable's value (checked to be set when the config was read), or the file's
    /// current content (`SecretValue`: read now — a config error when it cannot be — then re-read when it changes).
    static func secretReader(_ password: RedisSettings.Password?, key: String) throws -> (@Sendable () -> String?)? {
        switch password {
        case .environment(let name)?:
            let value = ProcessInfo.processInfo.environment[name]
            return { value.flatMap { $0.isEmpty ? nil : $0 } }
        case .file(let path)?:
            do {
                let secret = try SecretValue(file: path, key: key)
                return { secret.current }
            } catch {
                Stderr.write("tokenguard: config error: \(error)\n")
                throw ExitCodes.usage
            }
        case nil: return nil
        }
    }

    /// The system's CA bundle with `extra` appended, in a private file of this process: libcurl takes one bundle, and
    /// `http.ca_file` adds to the system's trust rather than replacing it.
    static func combinedCABundle(_ extra: String) throws -> String {
        let systemBundles = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"]
        var bundle = systemBundles.lazy.compactMap { FileManager.default.contents(atPath: $0) }.first ?? Data()
        guard let extraData = FileManager.default.contents(atPath: extra) else {
            Stderr.write("tokenguard: config error: http.ca_file: cannot read \(extra)\n")
            throw ExitCodes.usage
        }
        bundle.append(Data("\n".utf8))
        bundle.append(extraData)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tokenguard-ca-\(getpid()).pem").path
        guard FileManager.default.createFile(atPath: path, contents: bundle, attributes: [.posixPermissions: 0o600]) else {
            Stderr.write("tokenguard: cannot write the combined CA bundle to \(path)\n")
            throw ExitCodes.usage
        }
        return path
    }

    /// The revocation store the config names, behind its in-memory guard. A store that cannot be opened is a config
    /// error: running without it would accept revoked tokens.
    static func makeRevocations(_ configuration: Configuration) throws -> RevocationGuard {
        let store: any RevocationStore
        switch configuration.revocations.store {
        case .sqlite:
            guard let path = configuration.revocationsPath else {
                Logger(label: "tokenguard.revocations").warning(
                    "no key archive and no revocations.path: revocations live in this process's memory only")
                store = MemoryRevocationStore()
                break
            }
            do {
                store = try SQLiteRevocationStore(path: path)
            } catch {
                // A store that is only busy (another writer holds it) is "not now", not a config error.
                let text = "\(error)"
                if text.contains("locked") || text.contains("busy") {
                    Stderr.write("tokenguard: revocations: \(path) is busy: \(error)\n")
                    throw ExitCodes.unavailable
                }
                Stderr.write("tokenguard: config error: revocations: cannot open \(path): \(error) (set revocations.path to a writable file)\n")
                throw ExitCodes.usage
            }
        case .redis:
            let replayURL: String? = if case .redis(let url)? = configuration.replay?.store { url } else { nil }
            guard let url = configuration.redis?.url ?? replayURL else {
                Stderr.write("tokenguard: config error: revocations.store: redis needs a redis: block (or replay.redis_url)\n")
                throw ExitCodes.usage
            }
            store = RedisRevocationStore(endpoint: try redisEndpoint(configuration, url: url))
        }
        return RevocationGuard(store: store, maximumStaleness: Double(configuration.revocations.maximumStalenessSeconds))
    }
}

enum Logs {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var bootstrapped = false  // guarded by `lock`

    /// Logs go to standard error, as text or JSON lines; the level is TOKENGUARD_LOG_LEVEL or `defaultLevel`.
    static func bootstrap(format: String?, defaultLevel: Logger.Level) {
        lock.lock()
        defer { lock.unlock() }
        guard !bootstrapped else { return }
        bootstrapped = true
        let level = ProcessInfo.processInfo.environment["TOKENGUARD_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? defaultLevel
        let json = format?.lowercased() == "json"
        LoggingSystem.bootstrap { label in
            if json { return JSONLogHandler(label: label, logLevel: level) }
            return TextLogHandler(label: label, logLevel: level)
        }
    }
}

/// One line per event on standard error, as swift-log's stream handler writes it, with every control character in the
/// message and metadata escaped: values from upstreams (a discovery document, a JWKS `kid`) can never start a forged
/// line or send terminal escapes.
struct TextLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    init(label: String, logLevel: Logger.Level) {
        self.label = label
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    static func escaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F || (0x80..<0xA0).contains(scalar.value) || scalar == "\u{2028}" || scalar == "\u{2029}" {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 })
        let fields = merged.sorted { $0.key < $1.key }.map { "\(Self.escaped($0.key))=\(Self.escaped("\($0.value)"))" }.joined(separator: " ")
        let time = ISO8601DateFormatter().string(from: Date())
        let line =
            "\(time) \(event.level) \(label):\(fields.isEmpty ? "" : " " + fields) [\(event.source)] \(Self.escaped(event.message.description))\n"
        Stderr.write(line)
    }
}

/// One JSON object per log line on standard error: `{"ts","level","label","message",...metadata}`.
/// Callers never put tokens, nonces, secrets or emails in messages or metadata (a short hash instead).
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    init(label: String, logLevel: Logger.Level) {
        self.label = label
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var object = JSONObject([
            ("ts", .string(ISO8601DateFormatter().string(from: Date()))), ("level", .string(event.level.rawValue)), ("label", .string(label)),
            ("message", .string(event.message.description)),
        ])
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }).sorted(by: { $0.key < $1.key }) {
            object.set(key, .string("\(value)"))
        }
        Stderr.write(JSONWriter.string(.object(object)) + "\n")
    }
}
