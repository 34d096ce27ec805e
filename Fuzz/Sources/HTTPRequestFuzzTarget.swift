import TokenGuardService

@testable import TokenGuardCore

/// Decoding of `POST /v1/verify` and `POST /v1/verify/batch` bodies (the code the HTTP routes call), then
/// verification of what decodes, as the server does.
///
/// The first byte picks the endpoint; the rest is the body. Properties: nothing traps; a decoded request
/// has a non-empty provider and token; a decoded request written back as JSON decodes to the same request;
/// a batch never yields more items than its limit; every verdict is a JSON object with `valid` (absent only from an
/// answer that cannot decide now).
enum HTTPRequestFuzzTarget {
    static let maximumBatchItems = 16

    static let target = FuzzTarget(name: "http-request", summary: "HTTP API request body decoding (verify and batch)") { bytes in
        guard let selector = bytes.first else { return }
        let body = Array(bytes.dropFirst())
        if selector & 1 == 0 { checkDirectReader(body) }
        guard let object = try? VerifyRequest.parseBody(body) else { return }
        if selector & 1 == 0 {
            guard let request = try? VerifyRequest(object) else { return }
            check(request)
        } else {
            guard let items = try? VerifyRequest.batchItems(object, maximumItems: maximumBatchItems) else { return }
            require(items.count <= maximumBatchItems, "a batch over its item limit was accepted")
            for entry in items {
                guard let request = try? VerifyRequest.item(entry) else { continue }
                check(request)
            }
        }
    }

    /// The server's direct reader of verify bodies accepts exactly what the general path accepts, as the same request,
    /// and refuses the rest with the same error.
    static func checkDirectReader(_ body: [UInt8]) {
        let general = Result { () throws(VerificationError) in try VerifyRequest(VerifyRequest.parseBody(body)) }
        let direct = Result { () throws(VerificationError) in try VerifyRequest.decodeBody(body) }
        switch (general, direct) {
        case (.success(let expected), .success(let decoded)): require(decoded == expected, "the direct reader decoded a body differently")
        case (.failure(let expected), .failure(let refused)): require(refused == expected, "the direct reader refused a body differently")
        default: fatalError("the direct reader and the general path disagree on whether a body is a request")
        }
    }

    static func check(_ request: VerifyRequest) {
        require(!request.provider.isEmpty && !request.token.isEmpty, "decoded an empty provider or token")
        var members: [(String, JSONValue)] = [("provider", .string(request.provider)), ("token", .string(request.token))]
        if let nonce = request.nonce { members.append(("nonce", .string(nonce))) }
        members.append(("explain", .bool(request.explain)))
        let written = JSONWriter.bytes(.object(JSONObject(members)))
        guard let object = try? VerifyRequest.parseBody(written), let again = try? VerifyRequest(object) else {
            fatalError("a decoded request written back as JSON does not decode")
        }
        require(again == request, "a decoded request written back as JSON decodes differently")
        let result =
            FuzzFixtures.registry.verifyWithKeysInHand(provider: request.provider, token: request.token, nonce: request.nonce, at: FuzzFixtures.now)
        guard let result else { return }
        // A verdict says valid true or false; an answer that cannot decide now says neither.
        let undecided = if case .failure(let error) = result { error.code.isRetryable } else { false }
        require((result.json(provider: request.provider)["valid"]?.boolValue != nil) != undecided, "valid present exactly on a verdict")
    }
}
