import TokenGuardCore
import TokenGuardService

/// Turns one NDJSON request line into one NDJSON verdict line (contract: `tokenguard batch`).
///
/// Input: `{"id": any, "provider": "...", "token": "...", "nonce": "..."?, "at": unix?}`. Output: the verdict
/// with the same `id` first. A line that is not such a request gets its own `invalid_request` verdict; nothing
/// aborts the run.
package struct BatchProcessor: Sendable {
    package let registry: VerifierRegistry
    /// The time to verify at when a line has no `at` (the CLI's `--at`); nil means the current time.
    package let defaultAt: Int64?

    package init(registry: VerifierRegistry, defaultAt: Int64?) {
        self.registry = registry
        self.defaultAt = defaultAt
    }

    package struct Output: Sendable {
        package let json: [UInt8]
        /// nil for a valid token; otherwise the error code, for the run's summary.
        package let code: ErrorCode?
    }

    package func process(_ line: LineReader.Line) async -> Output {
        switch line {
        case .tooLong(let count, let head):
            // The id comes back when it lies within the line's first 4 KiB (contract: "Batch ids").
            let overlong = LenientLineScan(bytes: head)
            let error =
                overlong.tokenRunsOver
                ? VerificationError(.tokenTooLarge, "line is \(count) bytes: its token is over the limit")
                : VerificationError(.invalidRequest, "line is \(count) bytes, over the limit")
            return output(id: overlong.id, provider: nil, .failure(error))
        case .line(let bytes):
            return await process(bytes)
        }
    }

    package func process(_ bytes: [UInt8]) async -> Output {
        let request: BatchLineRequest
        do {
            request = try BatchLineRequest(bytes, defaultAt: defaultAt)
        } catch {
            // A line that is not JSON (a corrupt byte in its token, say) still gets its id back when the line is one
            // whole object whose members can all be told apart and only one is `id`: one bad byte in a log does not
            // leave its answer unmatched, and an id that might not be the line's own is never echoed.
            var id = error.id
            if id == .null {
                let scanned = LenientLineScan(bytes: bytes)
                if scanned.isComplete { id = scanned.id }
            }
            return output(id: id, provider: error.provider, .failure(error.error))
        }
        // JWS tokens verify from the keys in hand without suspending; opaque ones ask their provider.
        let result: VerificationResult
        if let immediate = registry.verifyWithKeysInHand(provider: request.provider, token: request.token, nonce: request.nonce, at: request.at) {
            result = immediate
        } else {
            result = await registry.verify(provider: request.provider, token: request.token, nonce: request.nonce, at: request.at)
        }
        return output(id: request.id, provider: request.provider, result)
    }

    /// `{"id": ..., ` then the verdict's members: a verdict's own JSON bytes (written once, claims straight from the
    /// payload) follow the id, rather than a tree of every claim built and written again per line.
    private func output(id: JSONValue, provider: String?, _ result: VerificationResult) -> Output {
        let code: ErrorCode?
        switch result {
        case .success: code = nil
        case .failure(let error): code = error.code
        }
        return Output(json: result.jsonBytes(provider: provider, leadingID: id), code: code)
    }
}
