import Testing
@testable import TokenGuardCore

/// The revocation rule and Apple's notification events, without a store.
struct RevocationTests {
    func verdict(provider: String = "apple", subject: String = "sub", userID: String? = nil, issuedAt: Int64?) -> Verdict {
        Verdict(
            provider: provider, subject: subject, userID: userID ?? subject, issuer: "i", audience: "a", expiresAt: nil, issuedAt: issuedAt,
            keyID: nil, email: nil, emailVerified: false, tenantID: nil, claims: JSONObject())
    }

    @Test("revoked when not_before ≥ iat or the token has no iat; by user_id or subject; per provider; by bytes")
    func rule() {
        let set = RevocationSet([
            Revocation(provider: "apple", subject: "sub", notBefore: 1000), Revocation(provider: "microsoft", subject: "oid-1", notBefore: 1000),
            Revocation(provider: "apple", subject: "sub", notBefore: 900),
        ])
        #expect(set.check(verdict(issuedAt: 999))?.code == .tokenRevoked)
        #expect(set.check(verdict(issuedAt: 1000))?.code == .tokenRevoked)
        #expect(set.check(verdict(issuedAt: 1001)) == nil)
        #expect(set.check(verdict(issuedAt: nil))?.code == .tokenRevoked)
        #expect(set.check(verdict(provider: "facebook", issuedAt: 10)) == nil)
        #expect(set.check(verdict(provider: "microsoft", subject: "pairwise", userID: "oid-1", issuedAt: 10))?.code == .tokenRevoked)
        #expect(set.check(verdict(subject: "su\u{0062}", issuedAt: 10))?.code == .tokenRevoked)
        #expect(set.check(verdict(subject: "SUB", issuedAt: 10)) == nil)
        #expect(set.check(verdict(subject: "s\u{0075}\u{0308}b", issuedAt: 10)) == nil)
        #expect(set.check(verdict(provider: "appl", subject: "e\u{0}sub", issuedAt: 10)) == nil)
        #expect(set.count == 2)
        #expect(RevocationSet().check(verdict(issuedAt: nil)) == nil)
        #expect(
            !Revocation.isValidSubject("") && !Revocation.isValidSubject("a\u{0}b") && !Revocation.isValidSubject(String(repeating: "a", count: 1025))
        )
        // Every subject a valid token can carry can be revoked: control characters and long ones included.
        #expect(Revocation.isValidSubject("a\nb\t") && Revocation.isValidSubject(String(repeating: "a", count: 1024)))
    }

    @Test("a NUL is found in a subject wherever it lies, and bytes around zero are not taken for it")
    func nulAnywhere() {
        for count in 1...20 {
            for filler: UInt8 in [0x01, 0x7F, 0x80, 0xFF, UInt8(ascii: "a")] {
                let plain = [UInt8](repeating: filler, count: count)
                #expect(plain.withUnsafeBufferPointer { !ByteCompare.containsZero($0) })
                for position in 0..<count {
                    var bytes = plain
                    bytes[position] = 0
                    #expect(bytes.withUnsafeBufferPointer { ByteCompare.containsZero($0) }, "\(count) \(filler) \(position)")
                    if filler == UInt8(ascii: "a") { #expect(!Revocation.isValidSubject(String(decoding: bytes, as: UTF8.self))) }
                }
            }
        }
    }

    func claims(_ events: JSONValue) -> JSONObject { JSONObject([("events", events)]) }

    @Test("events: a JSON string or object; type, sub and event_time (ms) checked; nothing traps")
    func events() throws {
        let text = #"{"type":"consent-revoked","sub":"001.x.2","event_time":1700000000123}"#
        let event = try AppleNotificationEvent.parse(claims(.string(text))).get()
        #expect(event == AppleNotificationEvent.parse(claims(try JSONParser.parse(Array(text.utf8)))).value)
        #expect(event.type == .consentRevoked && event.type.revokes && event.subject == "001.x.2" && event.eventTime == 1_700_000_000)
        #expect(try AppleNotificationEvent.parse(claims(.string(#"{"type":"email-enabled","sub":"s","event_time":"5000"}"#))).get().eventTime == 5)
        for bad in [
            #"{"type":"nope","sub":"s","event_time":1}"#, #"{"type":"account-delete","event_time":1}"#, #"{"type":"account-delete","sub":"s"}"#,
            #"{"type":"account-delete","sub":"s","event_time":-1}"#, #"{"type":"account-delete","sub":"s","event_time":1e300}"#,
            #"{"type":"account-delete","sub":"s","event_time":"-5"}"#, #"{"type":"account-delete","sub":"s","event_time":9223372036854775807}"#,
            #"{"type":"account-delete","sub":"","event_time":1}"#, "not json", "[]",
        ] {
            #expect(AppleNotificationEvent.parse(claims(.string(bad))).value == nil, "\(bad)")
        }
        #expect(AppleNotificationEvent.parse(claims(.integer(1))).value == nil)
        #expect(AppleNotificationEvent.parse(JSONObject()).value == nil)
    }
}

extension Result {
    var value: Success? { try? get() }
}
