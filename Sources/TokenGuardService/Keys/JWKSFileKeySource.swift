import Foundation
import TokenGuardCore
import TokenGuardSync

/// The contract's `jwks_file`: a local JWKS document that pins a provider's keys, re-read when it changes.
///
/// The file's modification time and size are looked at no more than once a second, so the hot path pays a
/// clock read, not a `stat`. A changed file that fails to parse keeps the previous good keys and reports
/// the problem through ``lastError``; a file that never parsed answers `keys_unavailable`.
package final class JWKSFileKeySource: KeySource {
    private struct State {
        var keySet: KeySet?
        var fileStamp: FileStamp?
        var lastCheck: ContinuousClock.Instant?
        var lastError: String?
    }

    private struct FileStamp: Equatable {
        let modified: Date
        let size: Int
    }

    package let path: String
    private let state: Locked<State>
    private let recheckInterval: Duration

    package init(path: String, recheckInterval: Duration = .seconds(1)) {
        self.path = path
        self.recheckInterval = recheckInterval
        self.state = Locked(State())
        _ = currentKeys()
    }

    package var lastError: String? { state.withLock { $0.lastError } }

    package func currentKeys() -> Result<KeySet, VerificationError> {
        let now = ContinuousClock.now
        return state.withLock { state in
            if let last = state.lastCheck, now - last < recheckInterval, let keys = state.keySet { return .success(keys) }
            state.lastCheck = now
            reload(&state)
            if let keys = state.keySet { return .success(keys) }
            return .failure(VerificationError(.keysUnavailable, "pinned JWKS file unusable: \(state.lastError ?? "unknown error")"))
        }
    }

    private func reload(_ state: inout State) {
        let stamp: FileStamp
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            stamp = FileStamp(
                modified: attributes[.modificationDate] as? Date ?? .distantPast,
                size: (attributes[.size] as? NSNumber)?.intValue ?? -1)
        } catch {
            state.lastError = "cannot read \(path): \(error.localizedDescription)"
            return
        }
        if stamp == state.fileStamp { return }
        guard stamp.size <= KeySet.maximumDocumentBytes else {
            state.lastError = "\(path) is \(stamp.size) bytes; the limit is \(KeySet.maximumDocumentBytes)"
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            state.lastError = "cannot read \(path)"
            return
        }
        do {
            let keys = try KeySet.parse(jwks: Array(data))
            state.keySet = keys
            state.fileStamp = stamp
            state.lastError = nil
        } catch {
            state.lastError = "\(path): \(error.message)"
        }
    }
}
