@testable import TokenGuardCore

/// The payload index against the tree parser on the same bytes (a differential target).
///
/// Properties: the index accepts exactly what `JSONParser.parseObject` accepts, with the same error when both
/// refuse; it has the same members, each decoding to the same value (looked up by the parser's names, and by names
/// that are not there, and as integers read in place); its canonical writing is byte for byte `JSONWriter`'s writing of the tree; and a verdict's
/// JSON bytes equal the JSON of its tree.
enum JSONIndexFuzzTarget {
    static let target = FuzzTarget(name: "json-index", summary: "payload index vs the tree parser: acceptance, values, canonical bytes") {
        bytes in
        let tree: Result<JSONObject, JSONParser.Error> = Result { () throws(JSONParser.Error) in try JSONParser.parseObject(bytes) }
        let index: Result<IndexedJSONObject, JSONParser.Error> = Result { () throws(JSONParser.Error) in try IndexedJSONObject(bytes) }
        switch (tree, index) {
        case (.failure(let treeError), .failure(let indexError)):
            require(treeError == indexError, "different errors: \(treeError) / \(indexError)")
        case (.success(let object), .success(let indexed)):
            require(indexed.count == object.count, "member count \(indexed.count) vs \(object.count)")
            for member in object.members {
                require(indexed[member.name] == member.value, "member \(member.name.debugDescription) decodes differently")
                require(indexed.contains(member.name), "member \(member.name.debugDescription) not found")
                if let integer = indexed.plainInteger(member.name) {
                    require(member.value == .integer(integer), "member \(member.name.debugDescription) read in place as \(integer)")
                }
            }
            // The verifier's claim table reads the same members as a search by name.
            let reader = ClaimsReader(claims: indexed)
            for claim in ClaimName.allCases {
                require(reader.value(claim) == indexed[claim.text], "claim \(claim.text) read differently through the table")
            }
            for probe in ["iss", "aud", "nonce", "", "\u{0}", "i\\u0073s", "exp\u{0}"] where object[probe] == nil {
                require(indexed[probe] == nil, "absent member \(probe.debugDescription) found")
            }
            require(indexed.materialized() == object, "materialized tree differs")
            var written: [UInt8] = []
            indexed.writeCanonical(into: &written)
            require(written == JSONWriter.bytes(.object(object)), "canonical bytes differ from JSONWriter's")
            require(!indexed.isCanonical || written == Array(bytes[indexed.span]), "an object found canonical is written otherwise")
            let verdict = Verdict(
                provider: "p", subject: "s", userID: "u", issuer: "i", audience: "a", expiresAt: 1, issuedAt: nil, keyID: nil, email: nil,
                emailVerified: false, tenantID: nil, claims: indexed)
            require(verdict.jsonBytes == JSONWriter.bytes(.object(verdict.json)), "verdict bytes differ from its tree's")
        case (.success, .failure(let error)):
            fatalError("the parser accepts what the index refuses: \(error)")
        case (.failure(let error), .success):
            fatalError("the index accepts what the parser refuses: \(error)")
        }
    }
}
