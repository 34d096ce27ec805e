import Foundation
import Logging
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardSync

/// The keys callers present in `X-Tokenguard-Key` (config `server.caller_keys_env` or `server.caller_keys_file`).
///
/// Without them, anyone who can reach the API can "burn" a stolen token in the replay store before the real
/// backend presents it. Keys are compared as SHA-256 digests in constant time (no early exit on the first byte,
/// no length leak), every configured key is compared on every request, and keys are never logged. A key file is
/// re-read when its modification time or size changes (checked at most once a second), so keys rotate without a
/// restart; an unreadable or empty file keeps the last good keys and says so in the log.
package final class CallerKeys: Sendable {
    package enum Source: Sendable, Equatable {
        /// Comma-separated keys in this environment variable, read once at start.
        case environment(name: String)
        /// Comma- or newline-separated keys in this file, re-read when it changes.
        case file(path: String)
    }

    struct State {
        var digests: [[UInt8]]
        var stamp: FileStamp?
        var checkedAt: Double
    }

    /// What tells a changed file: its bytes, through the symlink (Kubernetes swaps one to roll a Secret). Size and
    /// time would miss a key rotated to one of the same length in a file whose time was kept (`cp -p`, `rsync -t`).
    struct FileStamp: Equatable {
        let digest: [UInt8]
    }

    package let source: Source
    private let state: Locked<State>
    private let logger: Logger

    /// Longest key accepted; keys shorter than 16 bytes are refused at load (guessable).
    package static let maximumKeyBytes = 256
    package static let minimumKeyBytes = 16

    /// Loads the keys; throws a config error naming `key` when there are none or one is unusable.
    package init(source: Source, key: String, environment: [String: String], logger: Logger = Logger(label: "tokenguard.callers")) throws(ConfigError)
    {
        self.source = source
        self.logger = logger
        switch source {
        case .environment(let name):
            guard let text = environment[name] else { throw ConfigError(key, "environment variable \(name) is not set") }
            let keys = try Self.parse(text, key: key)
            state = Locked(State(digests: keys.map { SHA256.hash($0) }, stamp: nil, checkedAt: 0))
        case .file(let path):
            guard let (text, stamp) = Self.read(path) else { throw ConfigError(key, "cannot read \(path)") }
            let keys = try Self.parse(text, key: key)
            state = Locked(State(digests: keys.map { SHA256.hash($0) }, stamp: stamp, checkedAt: Date().timeIntervalSince1970))
        }
    }

    /// The keys in `text`: separated by commas or line ends, blanks around them ignored.
    static func parse(_ text: String, key: String) throws(ConfigError) -> [[UInt8]] {
        let isSeparator: (UInt8) -> Bool = { $0 == UInt8(ascii: ",") || $0 == 0x0A || $0 == 0x0D }
        let isBlank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
        var keys: [[UInt8]] = []
        for part in Array(text.utf8).split(whereSeparator: isSeparator) {
            let trimmed = part.drop(while: isBlank).reversed().drop(while: isBlank).reversed()
            guard !trimmed.isEmpty else { continue }
            let bytes = Array(trimmed)
            guard bytes.count >= minimumKeyBytes, bytes.count <= maximumKeyBytes, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw ConfigError(key, "each caller key must be \(minimumKeyBytes) to \(maximumKeyBytes) printable ASCII characters")
            }
            keys.append(bytes)
        }
        guard !keys.isEmpty else { throw ConfigError(key, "no caller keys given") }
        return keys
    }

    /// The file's text (at most 1 MiB) and its stamp.
    static func read(_ path: String) -> (String, FileStamp)? {
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: target),
            let size = (attributes[.size] as? NSNumber)?.intValue, size <= 1 << 20,
            let data = FileManager.default.contents(atPath: target), data.count <= 1 << 20
        else { return nil }
        return (String(decoding: data, as: UTF8.self), FileStamp(digest: SHA256.hash(data)))
    }

    /// True when `presented` is one of the keys. Constant time in the presented key's content.
    package func allows(_ presented: String?) -> Bool { keyID(of: presented) != nil }

    /// A name for the key `presented` matches, safe to log (the first 8 hex digits of its SHA-256), or nil when it
    /// matches none. Constant time in the presented key's content: every key is compared.
    package func keyID(of presented: String?) -> String? {
        guard let presented, !presented.isEmpty, presented.utf8.count <= Self.maximumKeyBytes else { return nil }
        refreshIfChanged()
        let digest = SHA256.hash(presented.utf8)
        let digests = state.withLock { $0.digests }
        var matched = false
        for candidate in digests {
            let equal = ConstantTime.equals(candidate, digest)
            matched = matched || equal
        }
        return matched ? String(SHA256.hexDigest(digest).prefix(8)) : nil
    }

    private func refreshIfChanged() {
        guard case .file(let path) = source else { return }
        let now = Date().timeIntervalSince1970
        let due = state.withLock { state -> Bool in
            guard now - state.checkedAt >= 1 || now < state.checkedAt else { return false }
            state.checkedAt = now
            return true
        }
        guard due else { return }
        guard let (text, readStamp) = Self.read(path) else {
            logger.warning("caller key file is unreadable; keeping the last good keys", metadata: ["path": "\(path)"])
            return
        }
        guard readStamp != state.withLock({ $0.stamp }) else { return }
        guard let keys = try? Self.parse(text, key: "server.caller_keys_file") else {
            logger.warning("caller key file has no usable keys; keeping the last good keys", metadata: ["path": "\(path)"])
            return
        }
        state.withLock { state in
            state.digests = keys.map { SHA256.hash($0) }
            state.stamp = readStamp
        }
        logger.info("caller keys reloaded", metadata: ["path": "\(path)", "keys": "\(keys.count)"])
    }
}
