import Foundation
import TokenGuardCore
import TokenGuardSync

/// The contract's `jwks_file`: a local JWKS document that pins a provider's keys, re-read when it changes.
///
/// The file is read again no more than once a second, so the hot path pays a clock read, not a read. Its content
/// decides whether it changed, not its size or modification time: a file replaced by another of the same size with
/// its time kept (`cp -p`, `rsync -t`, `touch -r`) is a change. A changed file that fails to parse keeps the
/// previous good keys and reports the problem through ``lastError``; a file that never parsed answers
/// `keys_unavailable`.
package final class JWKSFileKeySource: KeySource {
    private struct State {
        var keySet: KeySet?
        /// The bytes the current keys were parsed from.
        var parsedContent: [UInt8]?
        var lastCheck: ContinuousClock.Instant?
        var lastError: String?
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
        let size: Int
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            size = (attributes[.size] as? NSNumber)?.intValue ?? -1
        } catch {
            state.lastError = "cannot read \(path): \(error.localizedDescription)"
            return
        }
        guard size <= KeySet.maximumDocumentBytes else {
            state.lastError = "\(path) is \(size) bytes; the limit is \(KeySet.maximumDocumentBytes)"
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            state.lastError = "cannot read \(path)"
            return
        }
        // It may have grown between the size check and the read.
        guard data.count <= KeySet.maximumDocumentBytes else {
            state.lastError = "\(path) is \(data.count) bytes; the limit is \(KeySet.maximumDocumentBytes)"
            return
        }
        let content = Array(data)
        if let parsed = state.parsedContent, parsed == content {
            state.lastError = nil
            return
        }
        do {
            let keys = try KeySet.parse(jwks: content)
            state.keySet = keys
            state.parsedContent = content
            state.lastError = nil
        } catch {
            state.lastError = "\(path): \(error.message)"
        }
    }
}
