import TokenGuardCore

/// Gateway checks: reading the token and nonce out of forwarded headers, and writing claims into headers.
///
/// The input is header lines (`name: value`, LF-separated); the first byte picks the policy (Bearer header, custom
/// header, cookie, both). Properties: nothing traps; a token read is non-empty, within the size limit and comes from
/// exactly one header or cookie; two of the token's header or cookie are never resolved to one; the rest of the input,
/// parsed as JSON, is written as a claim header value of printable ASCII only that parses back to the same JSON.
enum ForwardAuthFuzzTarget {
    static let maxTokenBytes = 512

    static let policies: [ForwardAuthPolicy] = [
        ForwardAuthPolicy(), ForwardAuthPolicy(tokenHeader: "x-id-token"), ForwardAuthPolicy(tokenHeader: nil, tokenCookie: "tg"),
        ForwardAuthPolicy(tokenHeader: "authorization", tokenCookie: "tg"),
    ]

    static let target = FuzzTarget(name: "forward-auth", summary: "forward-auth credentials from headers, claim header values") { bytes in
        guard let selector = bytes.first else { return }
        let policy = policies[Int(selector) % policies.count]
        let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
        let headers = text.split(separator: "\n", omittingEmptySubsequences: true).compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), String(line[line.index(after: colon)...].drop { $0 == " " }))
        }
        switch ForwardAuthCredentials.read(headers, policy: policy, maxTokenBytes: maxTokenBytes) {
        case .success(let credentials):
            require(!credentials.token.isEmpty, "an empty token was read")
            require(credentials.token.utf8.count <= maxTokenBytes + 7, "a token over the limit was read")
            if let header = policy.tokenHeader {
                let count = headers.filter { ASCII.equalIgnoringCase($0.name, header) }.count
                require(count <= 1, "a token was read from one of \(count) \(header) headers")
            }
        case .failure(let error):
            require([.tokenMissing, .malformedToken, .tokenTooLarge].contains(error.code), "unexpected code \(error.code)")
        }
        if let value = try? JSONParser.parse(Array(bytes.dropFirst())) {
            let encoded = ClaimHeaderValue.encode(value)
            require(encoded.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }, "a claim header value outside printable ASCII")
            if case .string(let string) = value, string == encoded { return }
            // The same JSON value (a number may come back as an integer: 6E2 is 600 either way).
            let again = try? JSONParser.parse(Array(encoded.utf8))
            require(again.map(JSONWriter.bytes) == JSONWriter.bytes(value), "a claim header value does not parse back")
        }
    }
}
