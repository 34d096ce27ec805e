/// Turns one NDJSON request line into one NDJSON verdict line (contract: `tokenguard batch`).
///
/// Input: `{"id": any, "provider": "...", "token": "...", "nonce": "..."?, "at": unix?}`. Output: the verdict
/// with the same `id` first. A line that is not such a request gets its own `invalid_request` verdict; nothing
/// aborts the run.
public struct BatchProcessor: Sendable {
    public let registry: VerifierRegistry
    /// The time to verify at when a line has no `at` (the CLI's `--at`); nil means the current time.
    public let defaultAt: Int64?

    public init(registry: VerifierRegistry, defaultAt: Int64?) {
        self.registry = registry
        self.defaultAt = defaultAt
    }

    public struct Output: Sendable {
        public let json: [UInt8]
        /// nil for a valid token; otherwise the error code, for the run's summary.
        public let code: ErrorCode?
    }

    public func process(_ line: LineReader.Line) async -> Output {
        switch line {
        case .tooLong(let count):
            return output(id: .null, provider: nil, .failure(VerificationError(.invalidRequest, "line is \(count) bytes, over the limit")))
        case .line(let bytes):
            return await process(bytes)
        }
    }

    public func process(_ bytes: [UInt8]) async -> Output {
        let object: JSONObject
        do {
            object = try JSONParser.parseObject(bytes)
        } catch {
            return output(id: .null, provider: nil, .failure(VerificationError(.invalidRequest, "line is not a JSON object: \(error)")))
        }
        let id = object["id"] ?? .null
        let providerValue = object["provider"]
        let provider = providerValue?.stringValue
        func invalid(_ message: String) -> Output { output(id: id, provider: provider, .failure(VerificationError(.invalidRequest, message))) }
        guard let provider else { return invalid(providerValue == nil ? "provider is missing" : "provider is not a string") }
        guard let token = object["token"]?.stringValue else { return invalid("token is missing or not a string") }
        guard !token.isEmpty else { return invalid("token is empty") }
        var nonce: String? = nil
        if let nonceValue = object["nonce"], nonceValue != .null {
            guard let string = nonceValue.stringValue else { return invalid("nonce is not a string") }
            nonce = string
        }
        var at = defaultAt
        if let atValue = object["at"], atValue != .null {
            guard case .integer(let seconds) = atValue, seconds >= 0, seconds <= 253_402_300_799 else {
                return invalid("at must be an integer number of Unix seconds")
            }
            at = seconds
        }
        // JWS tokens verify from the keys in hand without suspending; opaque ones ask their provider.
        let result: VerificationResult
        if let immediate = registry.verifyWithKeysInHand(provider: provider, token: token, nonce: nonce, at: at) {
            result = immediate
        } else {
            result = await registry.verify(provider: provider, token: token, nonce: nonce, at: at)
        }
        return output(id: id, provider: provider, result)
    }

    private func output(id: JSONValue, provider: String?, _ result: VerificationResult) -> Output {
        var object = JSONObject([("id", id)])
        for member in result.json(provider: provider).members { object.set(member.name, member.value) }
        let code: ErrorCode?
        switch result {
        case .success: code = nil
        case .failure(let error): code = error.code
        }
        return Output(json: JSONWriter.bytes(.object(object)), code: code)
    }
}
