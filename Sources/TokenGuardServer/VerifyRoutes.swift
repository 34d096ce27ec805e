import Dispatch
import Hummingbird
import NIOCore
import TokenGuardCore

/// `POST /v1/verify` and `POST /v1/verify/batch`.
struct VerifyRoutes: Sendable {
    let registry: VerifierRegistry
    let settings: ServerSettings

    func register(on router: Router<TokenGuardRequestContext>) {
        let seconds = settings.requestTimeoutSeconds
        router.post("/v1/verify") { request, context in
            try await RequestTimeout.run(seconds: seconds) { try await verify(request, context) }
        }
        router.post("/v1/verify/batch") { request, context in
            try await RequestTimeout.run(seconds: seconds) { try await batch(request, context) }
        }
    }

    /// One verify request, validated strictly: unknown members, wrong types and empty values are `invalid_request`.
    struct VerifyItem: Sendable {
        let provider: String
        let token: String
        let nonce: String?
        let explain: Bool

        static let members: Set<String> = ["provider", "token", "nonce", "explain"]

        init(_ object: JSONObject) throws(APIError) {
            for name in object.names where !Self.members.contains(name) {
                throw APIError.invalidRequest("unknown member \"\(name.prefix(32))\" (allowed: explain, nonce, provider, token)")
            }
            guard let providerValue = object["provider"] else { throw APIError.invalidRequest("provider is required") }
            guard let provider = providerValue.stringValue, !provider.isEmpty else { throw APIError.invalidRequest("provider must be a non-empty string") }
            guard let tokenValue = object["token"] else { throw APIError.invalidRequest("token is required") }
            guard let token = tokenValue.stringValue else { throw APIError.invalidRequest("token must be a string") }
            guard !token.isEmpty else { throw APIError.invalidRequest("token is empty") }
            var nonce: String? = nil
            if let nonceValue = object["nonce"], nonceValue != .null {
                guard let string = nonceValue.stringValue, !string.isEmpty else { throw APIError.invalidRequest("nonce must be a non-empty string") }
                nonce = string
            }
            var explain = false
            if let explainValue = object["explain"], explainValue != .null {
                guard let flag = explainValue.boolValue else { throw APIError.invalidRequest("explain must be a boolean") }
                explain = flag
            }
            self.provider = provider
            self.token = token
            self.nonce = nonce
            self.explain = explain
        }
    }

    func readJSONObject(_ request: Request, limit: Int) async throws -> JSONObject {
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: limit)
        } catch {
            throw APIError(status: .contentTooLarge, code: .invalidRequest, message: "request body larger than \(limit) bytes")
        }
        do {
            return try JSONParser.parseObject(Array(buffer: body))
        } catch {
            throw APIError.invalidRequest("body is not a JSON object: \(error)")
        }
    }

    func verify(_ request: Request, _ context: TokenGuardRequestContext) async throws -> Response {
        let item = try VerifyItem(try await readJSONObject(request, limit: settings.maximumVerifyBodyBytes))
        let started = DispatchTime.now()
        let result = await registry.verify(provider: item.provider, token: item.token, nonce: item.nonce, at: nil)
        ServiceMetrics.record(provider: item.provider, result: result, startedAt: started)
        switch result {
        case .success:
            var verdict = result.json(provider: item.provider)
            if item.explain { verdict.set("checks", explanation(item)) }
            return JSONResponse.make(.object(verdict))
        case .failure(let error):
            switch error.code {
            case .keysUnavailable, .replayStoreUnavailable:
                throw APIError(
                    status: .serviceUnavailable, code: error.code, message: error.message,
                    retryAfterSeconds: error.retryAfterSeconds ?? settings.retryAfterSeconds)
            case .unknownProvider, .invalidRequest:
                throw APIError(status: .badRequest, code: error.code, message: error.message)
            default:
                var verdict = result.json(provider: item.provider)
                if item.explain { verdict.set("checks", explanation(item)) }
                return JSONResponse.make(.object(verdict), status: .unauthorized)
            }
        }
    }

    private func explanation(_ item: VerifyItem) -> JSONValue {
        guard let verifier = registry.verifiers[item.provider] else {
            return .array([.object(Explanation.Check(name: "provider", ok: nil, detail: "opaque tokens are checked by their provider").json)])
        }
        let explanation = verifier.explain(token: item.token, nonce: item.nonce, at: VerifierRegistry.systemClock())
        guard registry.replayGuards[item.provider] != nil else { return explanation.json }
        // With replay protection on, the replay check ran on the verification itself: its outcome is the verdict's.
        let checks = explanation.checks.map { check in
            check.name == "replay"
                ? Explanation.Check(name: "replay", ok: nil, detail: "replay protection is on: a token_replayed verdict means this token or nonce was used before")
                : check
        }
        return .array(checks.map { .object($0.json) })
    }

    func batch(_ request: Request, _ context: TokenGuardRequestContext) async throws -> Response {
        let object = try await readJSONObject(request, limit: settings.maximumBatchBodyBytes)
        for name in object.names where name != "items" { throw APIError.invalidRequest("unknown member \"\(name.prefix(32))\" (allowed: items)") }
        guard let items = object["items"]?.arrayValue else { throw APIError.invalidRequest("items must be an array") }
        guard items.count <= settings.maximumBatchItems else {
            throw APIError.invalidRequest("items has \(items.count) entries; the limit is \(settings.maximumBatchItems)")
        }
        let registry = self.registry
        let results = await withTaskGroup(of: (Int, JSONValue).self) { group in
            for (index, entry) in items.enumerated() {
                group.addTask {
                    let item: VerifyItem
                    do {
                        guard let itemObject = entry.objectValue else { throw APIError.invalidRequest("item is not an object") }
                        item = try VerifyItem(itemObject)
                    } catch {
                        let message = (error as? APIError)?.message ?? "invalid item"
                        return (index, .object(VerificationError(.invalidRequest, message).json(provider: entry.objectValue?["provider"]?.stringValue)))
                    }
                    let started = DispatchTime.now()
                    let result = await registry.verify(provider: item.provider, token: item.token, nonce: item.nonce, at: nil)
                    ServiceMetrics.record(provider: item.provider, result: result, startedAt: started)
                    return (index, .object(result.json(provider: item.provider)))
                }
            }
            var ordered = [JSONValue](repeating: .null, count: items.count)
            for await (index, value) in group { ordered[index] = value }
            return ordered
        }
        return JSONResponse.make(.object(JSONObject([("results", .array(results))])))
    }
}
