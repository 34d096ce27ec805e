/// The requests tokenguard accepts, decoded strictly from JSON: `POST /v1/verify` bodies, the items of
/// `POST /v1/verify/batch`, and the lines of `tokenguard batch`. Decoding is kept apart from serving so the
/// HTTP layer and the batch tool agree, and so the fuzz targets reach it without a server.

/// One `POST /v1/verify` body (or batch item): unknown members, wrong types and empty values are `invalid_request`.
public struct VerifyRequest: Sendable, Equatable {
    public let provider: String
    public let token: String
    public let nonce: String?
    public let explain: Bool
    /// A batch item's `id` (any JSON value), echoed in its result; nil for a single request.
    public let id: JSONValue?

    public static let members: Set<String> = ["provider", "token", "nonce", "explain"]

    public init(provider: String, token: String, nonce: String? = nil, explain: Bool = false, id: JSONValue? = nil) {
        self.provider = provider
        self.token = token
        self.nonce = nonce
        self.explain = explain
        self.id = id
    }

    /// - Parameter allowsID: batch items may carry `id`; a single request may not.
    public init(_ object: JSONObject, allowsID: Bool = false) throws(VerificationError) {
        func invalid(_ message: String) -> VerificationError { VerificationError(.invalidRequest, message) }
        for name in object.names where !Self.members.containsBytes(name) && !(allowsID && name.sameBytes(as: "id")) {
            throw invalid("unknown member \"\(name.prefix(32))\" (allowed: explain, nonce, provider, token\(allowsID ? ", id" : ""))")
        }
        guard let providerValue = object["provider"] else { throw invalid("provider is required") }
        guard let provider = providerValue.stringValue, !provider.isEmpty else { throw invalid("provider must be a non-empty string") }
        guard let tokenValue = object["token"] else { throw invalid("token is required") }
        guard let token = tokenValue.stringValue else { throw invalid("token must be a string") }
        guard !token.isEmpty else { throw invalid("token is empty") }
        var nonce: String? = nil
        if let nonceValue = object["nonce"], nonceValue != .null {
            guard let string = nonceValue.stringValue, !string.isEmpty else { throw invalid("nonce must be a non-empty string") }
            nonce = string
        }
        var explain = false
        if let explainValue = object["explain"], explainValue != .null {
            guard let flag = explainValue.boolValue else { throw invalid("explain must be a boolean") }
            explain = flag
        }
        self.init(provider: provider, token: token, nonce: nonce, explain: explain, id: allowsID ? object["id"] : nil)
    }

    /// A request body as a JSON object (the body size limit is the server's, checked before this).
    /// Takes any contiguous bytes (the server passes its receive buffer's view: no copy).
    public static func parseBody(_ bytes: some Collection<UInt8>) throws(VerificationError) -> JSONObject {
        do {
            return try JSONParser.parseObject(bytes)
        } catch {
            throw VerificationError(.invalidRequest, "body is not a JSON object: \(error)")
        }
    }

    /// The entries of a `POST /v1/verify/batch` body: `{"items": [...]}` with at most `maximumItems` entries.
    /// Each entry is decoded on its own (``item(_:)``) so one bad item does not spoil the others.
    public static func batchItems(_ object: JSONObject, maximumItems: Int) throws(VerificationError) -> [JSONValue] {
        for name in object.names where !name.sameBytes(as: "items") {
            throw VerificationError(.invalidRequest, "unknown member \"\(name.prefix(32))\" (allowed: items)")
        }
        guard let items = object["items"]?.arrayValue else { throw VerificationError(.invalidRequest, "items must be an array") }
        guard items.count <= maximumItems else {
            throw VerificationError(.invalidRequest, "items has \(items.count) entries; the limit is \(maximumItems)")
        }
        return items
    }

    /// One batch entry: an object decoded as a ``VerifyRequest``.
    public static func item(_ entry: JSONValue) throws(VerificationError) -> VerifyRequest {
        guard let object = entry.objectValue else { throw VerificationError(.invalidRequest, "item is not an object") }
        return try VerifyRequest(object, allowsID: true)
    }
}

/// One line of `tokenguard batch` input: `{"id": any, "provider": "...", "token": "...", "nonce": "..."?, "at": unix?}`.
public struct BatchLineRequest: Sendable {
    /// Echoed first in the verdict line (null when the line has none or is not a JSON object).
    public let id: JSONValue
    public let provider: String
    public let token: String
    public let nonce: String?
    /// The time to verify at, from the line or the run's default; nil means now.
    public let at: Int64?

    /// A line that is not a valid request: the error to report, with whatever `id` and `provider` it carried.
    public struct Invalid: Error, Sendable {
        public let id: JSONValue
        public let provider: String?
        public let error: VerificationError
    }

    /// Latest `at` accepted: 9999-12-31T23:59:59Z, as for NumericDates.
    public static let maximumAt: Int64 = 253_402_300_799

    public init(_ bytes: [UInt8], defaultAt: Int64?) throws(Invalid) {
        let object: JSONObject
        do {
            object = try JSONParser.parseObject(bytes)
        } catch {
            throw Invalid(id: .null, provider: nil, error: VerificationError(.invalidRequest, "line is not a JSON object: \(error)"))
        }
        let id = object["id"] ?? .null
        let providerValue = object["provider"]
        let providerName = providerValue?.stringValue
        func invalid(_ message: String) -> Invalid { Invalid(id: id, provider: providerName, error: VerificationError(.invalidRequest, message)) }
        guard let provider = providerName else { throw invalid(providerValue == nil ? "provider is missing" : "provider is not a string") }
        guard let token = object["token"]?.stringValue else { throw invalid("token is missing or not a string") }
        guard !token.isEmpty else { throw invalid("token is empty") }
        var nonce: String? = nil
        if let nonceValue = object["nonce"], nonceValue != .null {
            // Worded as the HTTP endpoints word it: a line and a request body are judged alike.
            guard let string = nonceValue.stringValue, !string.isEmpty else { throw invalid("nonce must be a non-empty string") }
            nonce = string
        }
        var at = defaultAt
        if let atValue = object["at"], atValue != .null {
            guard case .integer(let seconds) = atValue, seconds >= 0, seconds <= Self.maximumAt else {
                throw invalid("at must be an integer number of Unix seconds")
            }
            at = seconds
        }
        self.id = id
        self.provider = provider
        self.token = token
        self.nonce = nonce
        self.at = at
    }
}
