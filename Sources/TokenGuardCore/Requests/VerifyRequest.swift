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
            throw invalid("unknown member \"\(name.excerpt(bytes: 32))\" (allowed: explain, nonce, provider, token\(allowsID ? ", id" : ""))")
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

    /// A `POST /v1/verify` body decoded: what `VerifyRequest(parseBody(bytes))` gives, without building a JSON tree
    /// when the body is one object of the four members, each at most once and of its own type (what clients send).
    /// Any other body (an unknown or repeated member, another type, an empty string, bad JSON) is decoded by the
    /// general path, which words the error: the direct reader only ever accepts, with the general parser's string
    /// decoder, a subset of what the general path accepts, and a test holds the two to the same requests.
    public static func decodeBody(_ bytes: some Collection<UInt8>) throws(VerificationError) -> VerifyRequest {
        let direct: VerifyRequest?? = bytes.withContiguousStorageIfAvailable { Self.directly($0) }
        if let decoded = direct ?? Array(bytes).withUnsafeBufferPointer({ Self.directly($0) }) { return decoded }
        return try VerifyRequest(parseBody(bytes))
    }

    /// The request in `buffer` when it is the plain shape ``decodeBody(_:)`` describes; nil for anything else.
    static func directly(_ buffer: UnsafeBufferPointer<UInt8>) -> VerifyRequest? {
        var provider: String? = nil
        var token: String? = nil
        var nonce: String? = nil
        var explain = false
        let read = JSONParser.Cursor.readFlatObject(buffer) { name, cursor in
            if name.is("provider") {
                guard let value = cursor.string(), !value.isEmpty else { return nil }
                provider = value
                return 1
            }
            if name.is("token") {
                guard let value = cursor.string(), !value.isEmpty else { return nil }
                token = value
                return 2
            }
            if name.is("nonce") {
                if cursor.literal("null") { return 4 }
                guard let value = cursor.string(), !value.isEmpty else { return nil }
                nonce = value
                return 4
            }
            if name.is("explain") {
                if cursor.literal("true") {
                    explain = true
                } else if !cursor.literal("false") && !cursor.literal("null") {
                    return nil
                }
                return 8
            }
            return nil
        }
        guard read, let provider, let token else { return nil }
        return VerifyRequest(provider: provider, token: token, nonce: nonce, explain: explain)
    }

    /// The entries of a `POST /v1/verify/batch` body: `{"items": [...]}` with at most `maximumItems` entries.
    /// Each entry is decoded on its own (``item(_:)``) so one bad item does not spoil the others.
    public static func batchItems(_ object: JSONObject, maximumItems: Int) throws(VerificationError) -> [JSONValue] {
        for name in object.names where !name.sameBytes(as: "items") {
            throw VerificationError(.invalidRequest, "unknown member \"\(name.excerpt(bytes: 32))\" (allowed: items)")
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

    public static let members: Set<String> = ["id", "provider", "token", "nonce", "at"]

    /// Latest `at` accepted: 9999-12-31T23:59:59Z, as for NumericDates.
    public static let maximumAt: Int64 = 253_402_300_799

    public init(_ bytes: [UInt8], defaultAt: Int64?) throws(Invalid) {
        if let direct = bytes.withUnsafeBufferPointer({ Self.directly($0, defaultAt: defaultAt) }) {
            self = direct
            return
        }
        try self.init(generally: bytes, defaultAt: defaultAt)
    }

    init(id: JSONValue, provider: String, token: String, nonce: String?, at: Int64?) {
        self.id = id
        self.provider = provider
        self.token = token
        self.nonce = nonce
        self.at = at
    }

    /// The line decoded through a JSON tree: any line, and the wording of every refusal.
    package init(generally bytes: [UInt8], defaultAt: Int64?) throws(Invalid) {
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
        // As a request body's: a member tokenguard does not know is refused, never ignored (a line whose nonce was
        // written "Nonce" would otherwise be verified with no nonce at all).
        for name in object.names where !Self.members.containsBytes(name) {
            throw invalid("unknown member \"\(name.excerpt(bytes: 32))\" (allowed: at, id, nonce, provider, token)")
        }
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
        self.init(id: id, provider: provider, token: token, nonce: nonce, at: at)
    }

    /// The request in `buffer` without building a JSON tree, when the line is one object of the five members, each at
    /// most once and valid as it is (what a log of requests holds); nil for anything else, which the general path
    /// then decodes and words. As for ``VerifyRequest/decodeBody(_:)``: the same cursor reads the values, so this only
    /// ever accepts, with the same result, a subset of what the general path accepts (a test holds the two together).
    static func directly(_ buffer: UnsafeBufferPointer<UInt8>, defaultAt: Int64?) -> BatchLineRequest? {
        var id = JSONValue.null
        var provider: String? = nil
        var token: String? = nil
        var nonce: String? = nil
        var at = defaultAt
        let read = JSONParser.Cursor.readFlatObject(buffer) { name, cursor in
            if name.is("token") {
                guard let value = cursor.string(), !value.isEmpty else { return nil }
                token = value
                return 1
            }
            if name.is("provider") {
                guard let value = cursor.string() else { return nil }
                provider = value
                return 2
            }
            if name.is("nonce") {
                if cursor.literal("null") { return 4 }
                guard let value = cursor.string(), !value.isEmpty else { return nil }
                nonce = value
                return 4
            }
            if name.is("id") {
                // The depth of a member's value in the general parse of the line.
                guard let value = try? cursor.parseValue(depth: 1) else { return nil }
                id = value
                return 8
            }
            if name.is("at") {
                if cursor.literal("null") { return 16 }
                guard let value = try? cursor.parseValue(depth: 1), case .integer(let seconds) = value, seconds >= 0, seconds <= Self.maximumAt
                else { return nil }
                at = seconds
                return 16
            }
            return nil
        }
        guard read, let provider, let token else { return nil }
        return BatchLineRequest(id: id, provider: provider, token: token, nonce: nonce, at: at)
    }
}

extension JSONParser.Cursor {
    /// The frame of the requests' direct readers: `buffer` is exactly one JSON object (whitespace around it allowed)
    /// whose members `readMember` reads, each from the cursor placed at its value, answering the member's bit (one per
    /// name) or nil to leave the whole buffer to the general path. False when the buffer is not such an object or a
    /// member comes twice (the general parse refuses duplicates, and words it).
    static func readFlatObject(_ buffer: UnsafeBufferPointer<UInt8>, _ readMember: (MemberName, inout Self) -> Int?) -> Bool {
        var cursor = Self(bytes: buffer)
        guard cursor.skip("{") else { return false }
        var seen = 0
        repeat {
            cursor.skipWhitespace()
            guard let name = cursor.plainName(), cursor.skip(":") else { return false }
            cursor.skipWhitespace()
            guard let member = readMember(name, &cursor), seen & member == 0 else { return false }
            seen |= member
        } while cursor.skip(",")
        guard cursor.skip("}") else { return false }
        cursor.skipWhitespace()
        return cursor.position == buffer.count
    }

    /// Past whitespace and `byte`, when `byte` comes next.
    mutating func skip(_ byte: Unicode.Scalar) -> Bool {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: byte) else { return false }
        position += 1
        return true
    }

    /// A member name as the direct readers take it: its bytes where they lie, for a name of plain ASCII (no escape,
    /// control or non-ASCII byte, which the general path decodes and judges); nil otherwise, or when no string starts
    /// here.
    struct MemberName {
        let bytes: UnsafeBufferPointer<UInt8>

        /// True when the name is exactly `literal`'s bytes.
        func `is`(_ literal: StaticString) -> Bool {
            guard bytes.count == literal.utf8CodeUnitCount else { return false }
            return ByteCompare.equal(
                UnsafeRawBufferPointer(bytes), UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
        }
    }

    mutating func plainName() -> MemberName? {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return nil }
        let start = position + 1
        var end = start
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") {
                position = end + 1
                return MemberName(bytes: UnsafeBufferPointer(rebasing: bytes[start..<end]))
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x80 { return nil }
            end += 1
        }
        return nil
    }

    /// The string that starts here, or nil (the cursor then stands anywhere: the caller gives up).
    mutating func string() -> String? {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return nil }
        return try? parseString()
    }

    /// Past `text` when it comes next; else false, the cursor where it was. A value that does not even start like
    /// `text` (the usual case: a string where `null` is allowed) is told apart without the refusal's throw.
    mutating func literal(_ text: StaticString) -> Bool {
        guard position < bytes.count, text.utf8CodeUnitCount > 0, bytes[position] == text.utf8Start.pointee else { return false }
        return (try? expectLiteral(text)) != nil
    }
}
