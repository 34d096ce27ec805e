import Synchronization

/// A token that verified: the contract's verdict fields, plus every payload claim.
///
/// The fields live in one shared, immutable object: a verdict served from the verified-token cache is copied with a
/// few reference-count operations, not one per field. The claims are kept as the checked payload, indexed: a member is
/// decoded when asked for (``claim(_:)``), and the verdict's JSON writes them straight from the payload's bytes.
public struct Verdict: Sendable, Equatable {
    private final class Fields: Sendable {
        let provider: String
        let subject: String
        let userID: String
        let issuer: String
        let audience: String
        let expiresAt: Int64?
        let issuedAt: Int64?
        let keyID: String?
        let email: String?
        let emailVerified: Bool
        let tenantID: String?
        let claims: IndexedJSONObject
        /// Apple's account flags, kept as two scalars: a list of two members built for every Apple verification was an
        /// allocation, and its release, that only the JSON writer and ``Verdict/extra`` ever read.
        let appleFlags: AppleAccountFlags?
        /// Any other provider-specific members, after Apple's.
        let extraMembers: JSONObject
        /// The JSON text once written: 0, or a retained ``WrittenJSON`` that this object releases when it dies. The
        /// first writer wins; readers take it without a lock (a cached verdict is served many times, from any thread).
        private let written = Atomic<UInt>(0)

        init(
            provider: String, subject: String, userID: String, issuer: String, audience: String, expiresAt: Int64?, issuedAt: Int64?,
            keyID: String?, email: String?, emailVerified: Bool, tenantID: String?, claims: IndexedJSONObject, appleFlags: AppleAccountFlags?,
            extraMembers: JSONObject
        ) {
            self.provider = provider
            self.subject = subject
            self.userID = userID
            self.issuer = issuer
            self.audience = audience
            self.expiresAt = expiresAt
            self.issuedAt = issuedAt
            self.keyID = keyID
            self.email = email
            self.emailVerified = emailVerified
            self.tenantID = tenantID
            self.claims = claims
            self.appleFlags = appleFlags
            self.extraMembers = extraMembers
        }

        /// The same fields with other `extra` members (and no JSON written yet).
        func with(extra: JSONObject) -> Fields {
            Fields(
                provider: provider, subject: subject, userID: userID, issuer: issuer, audience: audience, expiresAt: expiresAt,
                issuedAt: issuedAt, keyID: keyID, email: email, emailVerified: emailVerified, tenantID: tenantID, claims: claims,
                appleFlags: nil, extraMembers: extra)
        }

        deinit {
            if let pointer = UnsafeRawPointer(bitPattern: written.load(ordering: .acquiring)) {
                Unmanaged<WrittenJSON>.fromOpaque(pointer).release()
            }
        }

        /// The JSON text if it was written already.
        var writtenJSON: [UInt8]? {
            guard let pointer = UnsafeRawPointer(bitPattern: written.load(ordering: .acquiring)) else { return nil }
            return Unmanaged<WrittenJSON>.fromOpaque(pointer).takeUnretainedValue().bytes
        }

        /// The JSON text, written by `write` on first use.
        func json(_ write: () -> [UInt8]) -> [UInt8] {
            if let pointer = UnsafeRawPointer(bitPattern: written.load(ordering: .acquiring)) {
                return Unmanaged<WrittenJSON>.fromOpaque(pointer).takeUnretainedValue().bytes
            }
            let mine = WrittenJSON(bytes: write())
            let retained = Unmanaged.passRetained(mine)
            let (stored, winner) = written.compareExchange(
                expected: 0, desired: UInt(bitPattern: retained.toOpaque()), ordering: .acquiringAndReleasing)
            if stored { return mine.bytes }
            // Another thread wrote it first: the same bytes, so theirs is kept and this one dropped.
            retained.release()
            guard let pointer = UnsafeRawPointer(bitPattern: winner) else { return mine.bytes }
            return Unmanaged<WrittenJSON>.fromOpaque(pointer).takeUnretainedValue().bytes
        }
    }

    private final class WrittenJSON: Sendable {
        let bytes: [UInt8]
        init(bytes: [UInt8]) { self.bytes = bytes }
    }

    private var fields: Fields
    public var provider: String { fields.provider }
    public var subject: String { fields.subject }
    public var userID: String { fields.userID }
    public var issuer: String { fields.issuer }
    /// The configured audience the token matched.
    public var audience: String { fields.audience }
    /// nil for an opaque token its provider gives no expiry for (a GitHub OAuth app token).
    public var expiresAt: Int64? { fields.expiresAt }
    public var issuedAt: Int64? { fields.issuedAt }
    public var keyID: String? { fields.keyID }
    public var email: String? { fields.email }
    /// Normalised to a boolean: Apple sent the string `"true"` before 2024; absent means false.
    public var emailVerified: Bool { fields.emailVerified }
    public var tenantID: String? { fields.tenantID }
    /// Every payload claim as a tree, decoded on each call; ``claim(_:)`` decodes one.
    public var claims: JSONObject { fields.claims.materialized() }
    /// One payload claim, decoded; nil when the token does not carry it.
    public func claim(_ name: String) -> JSONValue? { fields.claims[name] }
    /// Provider-specific verdict fields, written before `claims` (Apple's `is_private_email` and `real_user_status`,
    /// a `facebook` provider's `login`). The JSON text is written once and shared by every copy; a change to `extra`
    /// starts a new one.
    public var extra: JSONObject {
        get {
            guard let flags = fields.appleFlags else { return fields.extraMembers }
            var members = JSONObject()
            members.reserveCapacity(2 + fields.extraMembers.count)
            members.appendUnchecked("is_private_email", .bool(flags.isPrivateEmail))
            members.appendUnchecked("real_user_status", flags.realUserStatus.map { .integer(Int64($0)) } ?? .null)
            for member in fields.extraMembers.members { members.appendUnchecked(member.name, member.value) }
            return members
        }
        set { fields = fields.with(extra: newValue) }
    }

    public init(
        provider: String, subject: String, userID: String, issuer: String, audience: String, expiresAt: Int64?,
        issuedAt: Int64?, keyID: String?, email: String?, emailVerified: Bool, tenantID: String?, claims: JSONObject
    ) {
        self.init(
            provider: provider, subject: subject, userID: userID, issuer: issuer, audience: audience, expiresAt: expiresAt,
            issuedAt: issuedAt, keyID: keyID, email: email, emailVerified: emailVerified, tenantID: tenantID,
            claims: IndexedJSONObject(claims))
    }

    init(
        provider: String, subject: String, userID: String, issuer: String, audience: String, expiresAt: Int64?,
        issuedAt: Int64?, keyID: String?, email: String?, emailVerified: Bool, tenantID: String?, claims: IndexedJSONObject,
        appleFlags: AppleAccountFlags? = nil
    ) {
        fields = Fields(
            provider: provider, subject: subject, userID: userID, issuer: issuer, audience: audience, expiresAt: expiresAt, issuedAt: issuedAt,
            keyID: keyID, email: email, emailVerified: emailVerified, tenantID: tenantID, claims: claims, appleFlags: appleFlags,
            extraMembers: JSONObject())
    }

    public static func == (lhs: Verdict, rhs: Verdict) -> Bool {
        lhs.provider == rhs.provider && lhs.subject == rhs.subject && lhs.userID == rhs.userID && lhs.issuer == rhs.issuer
            && lhs.audience == rhs.audience && lhs.expiresAt == rhs.expiresAt && lhs.issuedAt == rhs.issuedAt && lhs.keyID == rhs.keyID
            && lhs.email == rhs.email && lhs.emailVerified == rhs.emailVerified && lhs.tenantID == rhs.tenantID && lhs.claims == rhs.claims
            && lhs.extra == rhs.extra
    }

    /// ``json`` as compact JSON bytes, written on first use: the same bytes as `JSONWriter.bytes(.object(json))`, with
    /// the claims written from the payload without building their tree.
    public var jsonBytes: [UInt8] {
        fields.json {
            var out: [UInt8] = []
            out.reserveCapacity(fields.claims.span.count + 512)
            out.append(UInt8(ascii: "{"))
            writeMembers(into: &out)
            return out
        }
    }

    /// ``jsonBytes`` with `{"id": id, ` first, in one buffer: a batch answer, written without the verdict's own
    /// JSON text first (which would be kept with the verdict, and copied after the id).
    func jsonBytes(leadingID id: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        let written = fields.writtenJSON
        out.reserveCapacity((written?.count ?? fields.claims.span.count + 512) + 32)
        out.append(contentsOf: #"{"id":"#.utf8)
        JSONWriter.write(id, into: &out)
        out.append(UInt8(ascii: ","))
        if let written { out.append(contentsOf: written.dropFirst()) } else { writeMembers(into: &out) }
        return out
    }

    /// The JSON text after its opening `{`: the members of ``head`` written one by one, without the list (whose
    /// strings would each be retained and released), then the claims from the payload's bytes, then `}`. `json` gives
    /// the same bytes (a test checks).
    private func writeMembers(into out: inout [UInt8]) {
        func string(_ literal: StaticString, _ value: String?) {
            out.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
            if let value { JSONWriter.writeString(value, into: &out) } else { out.append(contentsOf: "null".utf8) }
        }
        func integer(_ literal: StaticString, _ value: Int64?) {
            out.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
            if let value { JSONWriter.writeInteger(value, into: &out) } else { out.append(contentsOf: "null".utf8) }
        }
        string(#""valid":true,"provider":"#, provider)
        string(#","subject":"#, subject)
        string(#","user_id":"#, userID)
        string(#","issuer":"#, issuer)
        string(#","audience":"#, audience)
        integer(#","expires_at":"#, expiresAt)
        integer(#","issued_at":"#, issuedAt)
        string(#","key_id":"#, keyID)
        string(#","email":"#, email)
        out.append(contentsOf: (emailVerified ? #","email_verified":true"# : #","email_verified":false"#).utf8)
        string(#","tenant_id":"#, tenantID)
        if let flags = fields.appleFlags {
            out.append(contentsOf: (flags.isPrivateEmail ? #","is_private_email":true"# : #","is_private_email":false"#).utf8)
            integer(#","real_user_status":"#, flags.realUserStatus.map(Int64.init))
        }
        for member in fields.extraMembers.members {
            out.append(UInt8(ascii: ","))
            JSONWriter.writeString(member.name, into: &out)
            out.append(UInt8(ascii: ":"))
            JSONWriter.write(member.value, into: &out)
        }
        out.append(contentsOf: #","claims":"#.utf8)
        fields.claims.writeCanonical(into: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// The verdict as the contract's JSON object.
    public var json: JSONObject { JSONObject(head + [("claims", .object(claims))]) }

    /// Every member before `claims`, in the contract's order (``jsonBytes`` writes the same members in the same
    /// order without this list).
    private var head: [(String, JSONValue)] {
        func optional(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
        var members: [(String, JSONValue)] = []
        members.reserveCapacity(12 + extra.count)
        members.append(("valid", .bool(true)))
        members.append(("provider", .string(provider)))
        members.append(("subject", .string(subject)))
        members.append(("user_id", .string(userID)))
        members.append(("issuer", .string(issuer)))
        members.append(("audience", .string(audience)))
        members.append(("expires_at", expiresAt.map(JSONValue.integer) ?? .null))
        members.append(("issued_at", issuedAt.map(JSONValue.integer) ?? .null))
        members.append(("key_id", optional(keyID)))
        members.append(("email", optional(email)))
        members.append(("email_verified", .bool(emailVerified)))
        members.append(("tenant_id", optional(tenantID)))
        for member in extra.members { members.append((member.name, member.value)) }
        return members
    }
}

extension VerificationError {
    /// The contract's rejected-token JSON: `{"valid": false, "provider": ..., "error": {"code", "message"}}`. An
    /// answer that cannot decide now (``ErrorCode/isRetryable``) has no `valid` member, in a batch result as in the
    /// single endpoint's 503 body: an outage must not read as a rejected token. `provider` is the name as requested,
    /// which may be no configured one: echoed in at most 64 bytes, the longest a configured name can be.
    public func json(provider: String?) -> JSONObject {
        let error = JSONObject([("code", .string(code.rawValue)), ("message", .string(message))])
        let provider = provider.map { JSONValue.string($0.excerpt(bytes: 64)) } ?? .null
        if code.isRetryable { return JSONObject([("provider", provider), ("error", .object(error))]) }
        return JSONObject([("valid", .bool(false)), ("provider", provider), ("error", .object(error))])
    }
}

/// The result of verifying one token.
public typealias VerificationResult = Result<Verdict, VerificationError>

extension Result where Success == Verdict, Failure == VerificationError {
    /// ``json(provider:)`` as JSON text: a verdict's own bytes (claims written from the payload), or the error's.
    public func jsonBytes(provider: String?) -> [UInt8] {
        switch self {
        case .success(let verdict): verdict.jsonBytes
        case .failure(let error): JSONWriter.bytes(.object(error.json(provider: provider)))
        }
    }

    /// ``jsonBytes(provider:)`` with `"id"` as its first member when `id` is given (a batch answer; contract: "Batch
    /// ids").
    public func jsonBytes(provider: String?, leadingID id: JSONValue?) -> [UInt8] {
        guard let id else { return jsonBytes(provider: provider) }
        switch self {
        case .success(let verdict): return verdict.jsonBytes(leadingID: id)
        case .failure: return JSONWriter.withLeadingID(id, jsonBytes(provider: provider))
        }
    }

    public func json(provider: String?) -> JSONObject {
        switch self {
        case .success(let verdict): verdict.json
        case .failure(let error): error.json(provider: provider)
        }
    }
}

/// Apple's account flags, normalised: `is_private_email` a boolean, `real_user_status` 0–2 or nil (written `null`).
struct AppleAccountFlags: Sendable {
    let isPrivateEmail: Bool
    let realUserStatus: Int8?
}
