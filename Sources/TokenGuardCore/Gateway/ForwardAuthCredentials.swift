/// The token and nonce of a gateway check, read from the forwarded request's headers by the provider's
/// ``ForwardAuthPolicy``. Ambiguity is refused, never resolved by "first wins": two `Authorization` headers, two
/// token cookies or two nonce headers are `malformed_token` (a gateway and a client could each supply one).
public struct ForwardAuthCredentials: Sendable, Equatable {
    public let token: String
    public let nonce: String?

    public init(token: String, nonce: String?) {
        self.token = token
        self.nonce = nonce
    }

    /// Reads the credentials from `headers` (names in any case, values as received).
    /// - Parameter maxTokenBytes: the token limit; a token over it is `token_too_large`, counted as the bytes that
    ///   follow `Bearer ` and its spaces (the whole value of another header, a cookie's value without its blanks).
    public static func read(
        _ headers: [(name: String, value: String)], policy: ForwardAuthPolicy, maxTokenBytes: Int
    ) -> Result<ForwardAuthCredentials, VerificationError> {
        var nonce: String? = nil
        let nonces = values(of: policy.nonceHeader, in: headers)
        if nonces.count > 1 { return .failure(VerificationError(.malformedToken, "the request has \(nonces.count) \(policy.nonceHeader) headers")) }
        // An empty nonce header is no nonce (a gateway may send the header empty).
        if let value = nonces.first, !value.isEmpty {
            guard value.utf8.count <= TokenVerifier.maximumNonceBytes else {
                return .failure(VerificationError(.malformedToken, "\(policy.nonceHeader) is longer than \(TokenVerifier.maximumNonceBytes) bytes"))
            }
            // Nonces are bytes: one the HTTP layer had to repair is not the nonce the app sent.
            guard !LossyText.holdsReplacement(value.utf8) else {
                return .failure(VerificationError(.malformedToken, "\(policy.nonceHeader) holds a byte that is not UTF-8 text"))
            }
            nonce = value
        }
        if let header = policy.tokenHeader {
            let found = values(of: header, in: headers)
            if found.count > 1 { return .failure(VerificationError(.malformedToken, "the request has \(found.count) \(header) headers")) }
            if let value = found.first {
                return token(fromHeader: header, value, maxTokenBytes: maxTokenBytes).map { ForwardAuthCredentials(token: $0, nonce: nonce) }
            }
        }
        if let cookie = policy.tokenCookie {
            switch cookieValue(named: cookie, in: values(of: "cookie", in: headers), maxTokenBytes: maxTokenBytes) {
            case .success(let token?): return .success(ForwardAuthCredentials(token: token, nonce: nonce))
            case .success(nil): break
            case .failure(let error): return .failure(error)
            }
        }
        var places: [String] = []
        if let header = policy.tokenHeader { places.append(header == "authorization" ? "Authorization: Bearer" : header) }
        if let cookie = policy.tokenCookie { places.append("cookie \(cookie)") }
        return .failure(VerificationError(.tokenMissing, "no token in the request (looked in \(places.joined(separator: " and ")))"))
    }

    /// The values of every header named `name` (ASCII case-insensitive).
    static func values(of name: String, in headers: [(name: String, value: String)]) -> [String] {
        headers.compactMap { ASCII.equalIgnoringCase($0.name, name) ? $0.value : nil }
    }

    /// The token in a header value: `Bearer <token>` for `authorization` (scheme in any case, one space or more),
    /// the whole value for any other header.
    static func token(fromHeader header: String, _ value: String, maxTokenBytes: Int) -> Result<String, VerificationError> {
        let bytes = value.utf8
        guard header == "authorization" else {
            guard bytes.count <= maxTokenBytes else { return .failure(tooLarge(bytes, maxTokenBytes)) }
            guard !bytes.isEmpty else { return .failure(VerificationError(.malformedToken, "\(header) is empty")) }
            return .success(value)
        }
        let scheme = bytes.prefix(6)
        guard scheme.count == 6, ASCII.equalIgnoringCase(String(decoding: scheme, as: UTF8.self), "bearer"),
            bytes.dropFirst(6).first == UInt8(ascii: " ")
        else { return .failure(VerificationError(.malformedToken, "Authorization must be \"Bearer <token>\"")) }
        let token = bytes.dropFirst(6).drop { $0 == UInt8(ascii: " ") }
        guard !token.isEmpty else { return .failure(VerificationError(.malformedToken, "Authorization: Bearer carries no token")) }
        guard token.count <= maxTokenBytes else { return .failure(tooLarge(token, maxTokenBytes)) }
        return .success(String(decoding: token, as: UTF8.self))
    }

    /// The value of the cookie `name` across every `Cookie` header; nil when absent; two of them is an error.
    static func cookieValue(named name: String, in cookieHeaders: [String], maxTokenBytes: Int) -> Result<String?, VerificationError> {
        var found: [Substring.UTF8View] = []
        for header in cookieHeaders {
            for pair in header.utf8.split(separator: UInt8(ascii: ";")) {
                let trimmed = pair.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
                guard let equals = trimmed.firstIndex(of: UInt8(ascii: "=")) else { continue }
                if trimmed[..<equals].elementsEqual(name.utf8) { found.append(trimmed[trimmed.index(after: equals)...]) }
            }
        }
        guard let raw = found.first else { return .success(nil) }
        guard found.count == 1 else { return .failure(VerificationError(.malformedToken, "the request has \(found.count) \(name) cookies")) }
        var value = Array(raw.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
        while let last = value.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { value.removeLast() }
        // RFC 6265 allows the value in double quotes.
        if value.count >= 2, value.first == UInt8(ascii: "\""), value.last == UInt8(ascii: "\"") { value = Array(value.dropFirst().dropLast()) }
        guard value.count <= maxTokenBytes else { return .failure(tooLarge(value, maxTokenBytes)) }
        guard !value.isEmpty else { return .failure(VerificationError(.malformedToken, "cookie \(name) is empty")) }
        return .success(String(decoding: value, as: UTF8.self))
    }

    /// Over the limit as counted here. Header values reach us as text, each byte that was not UTF-8 replaced by
    /// U+FFFD (three bytes): a token holding one is refused for that byte, since what it counted is not what was sent.
    static func tooLarge(_ token: some Collection<UInt8>, _ maximum: Int) -> VerificationError {
        if LossyText.holdsReplacement(token) { return VerificationError(.malformedToken, LossyText.tokenRefusal) }
        return VerificationError(.tokenTooLarge, "token is \(token.count) bytes; the limit is \(maximum)")
    }

}
