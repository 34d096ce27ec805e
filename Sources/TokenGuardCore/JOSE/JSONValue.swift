/// A JSON value decoded from untrusted bytes, keeping integers exact and object members in their original order.
///
/// Used for JOSE headers, claims (echoed back in verdicts), JWKS documents and NDJSON lines.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// An integer literal that fits in `Int64` exactly.
    case integer(Int64)
    /// Any other number (fraction, exponent, or too large for `Int64`); always finite. A parsed number keeps its
    /// `literal` (its text as it came, JSON's number grammar checked), so that what is echoed (a batch item's `id`) is
    /// what was sent, not the nearest double (`18446744073709551615` is not `1.8446744073709552e19`). Values compare
    /// by the double.
    case number(Double, literal: String? = nil)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var objectValue: JSONObject? {
        if case .object(let o) = self { return o }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// Structural equality with strings compared by their bytes (never Unicode canonical equivalence).
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let l), .bool(let r)): l == r
        case (.integer(let l), .integer(let r)): l == r
        case (.number(let l, _), .number(let r, _)): l == r
        case (.string(let l), .string(let r)): l.sameBytes(as: r)
        case (.array(let l), .array(let r)): l == r
        case (.object(let l), .object(let r)): l == r
        default: false
        }
    }
}

/// A JSON object whose member names are unique (the parser rejects duplicates) and kept in input order.
public struct JSONObject: Sendable, Equatable {
    public private(set) var members: [(name: String, value: JSONValue)]

    public init() { members = [] }

    public init(_ members: [(String, JSONValue)]) {
        self.members = members.map { (name: $0.0, value: $0.1) }
    }

    /// The member whose name has exactly these bytes (never a Unicode-equivalent spelling).
    public subscript(name: String) -> JSONValue? {
        for member in members where member.name.sameBytes(as: name) { return member.value }
        return nil
    }

    public var count: Int { members.count }
    public var names: [String] { members.map(\.name) }

    /// Appends a member; the caller guarantees the name is not present yet (the parser checks).
    mutating func appendUnchecked(_ name: String, _ value: JSONValue) { members.append((name, value)) }

    /// Room for `count` members, so a parsed object grows its storage once rather than doubling it as it fills.
    mutating func reserveCapacity(_ count: Int) { members.reserveCapacity(count) }

    /// Sets a member, replacing an existing one of the same name.
    public mutating func set(_ name: String, _ value: JSONValue) {
        if let index = members.firstIndex(where: { $0.name.sameBytes(as: name) }) {
            members[index].value = value
        } else {
            members.append((name, value))
        }
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.members.count == rhs.members.count else { return false }
        for member in lhs.members where rhs[member.name] != member.value { return false }
        return true
    }
}
