import Foundation
import TokenGuardSync

/// A secret from the environment (read once) or from a file (`*_file`), re-read when the file changes — checked at
/// most once a second — as Kubernetes updates a mounted Secret, so it rotates without a restart. An unreadable or
/// empty file keeps the last good value. The value is never logged.
package final class SecretValue: Sendable {
    private struct State {
        var value: String
        var stamp: CallerKeys.FileStamp?
        var checkedAt: Double
    }

    package let path: String?
    private let state: Locked<State>

    package init(_ value: String) {
        path = nil
        state = Locked(State(value: value, stamp: nil, checkedAt: 0))
    }

    /// Reads the file now; a config error (naming `key`) when it cannot be read or is empty.
    package init(file path: String, key: String) throws(ConfigError) {
        guard let (value, stamp) = Self.read(path) else { throw ConfigError(key, "cannot read a secret from \(path)") }
        self.path = path
        state = Locked(State(value: value, stamp: stamp, checkedAt: Date().timeIntervalSince1970))
    }

    static func read(_ path: String) -> (String, CallerKeys.FileStamp)? {
        guard let (text, stamp) = CallerKeys.read(path) else { return nil }
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return value.isEmpty || value.utf8.count > 4096 ? nil : (value, stamp)
    }

    package var current: String {
        guard let path else { return state.withLock { $0.value } }
        let now = Date().timeIntervalSince1970
        let due = state.withLock { state -> Bool in
            guard now - state.checkedAt >= 1 || now < state.checkedAt else { return false }
            state.checkedAt = now
            return true
        }
        if due, let (value, readStamp) = Self.read(path), readStamp != state.withLock({ $0.stamp }) {
            state.withLock {
                $0.value = value
                $0.stamp = readStamp
            }
        }
        return state.withLock { $0.value }
    }
}
