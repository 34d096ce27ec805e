import Foundation
import Testing
import TokenGuardTestSupport

@testable import TokenGuardCore
@testable import TokenGuardCrypto

/// The hot path's shortcuts against the plain way they stand in for: each must give the same answer on every input.
struct HotPathEquivalenceTests {
    /// The outcome of a parse as something comparable: the segments, or the refusal's code and message.
    func outcome(_ parse: () throws(VerificationError) -> CompactJWS) -> String {
        do {
            let jws = try parse()
            let header = jws.header
            return
                "ok \(Array(jws.signingInput)) \(Array(jws.payload)) \(Array(jws.signature)) \(Array(jws.encodedHeader)) \(header.algorithm) \(header.keyID ?? "-") \(header.type ?? "-") \(header.hasNonce) \(header.ignoredKeyReferences)"
        } catch {
            return "\(error.code.rawValue) \(error.message)"
        }
    }

    @Test("the two-ended dot search gives what the exact segment parse gives, for mutated tokens of every shape")
    func fastParseMatchesExactParse() throws {
        let key = try SharedTestKeys.rsa()
        let token = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        let pieces: [String] = [".", "..", "a", "A", "-", "_", "=", "!", "é", "\u{0}", "eyJ", "e30", "Zm9v", ""]
        var random = SeededRandom(seed: 7)
        var tokens: [[UInt8]] = [Array(token.utf8), [], Array(".".utf8), Array("..".utf8), Array("...".utf8)]
        let bytes = Array(token.utf8)
        for _ in 0..<4000 {
            var mutated = bytes
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let at = Int.random(in: 0...mutated.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: mutated.insert(contentsOf: Array(pieces.randomElement(using: &random)!.utf8), at: at)
                case 1 where at < mutated.count: mutated.remove(at: at)
                default: mutated = Array(mutated[..<at]) + Array(pieces.randomElement(using: &random)!.utf8) + Array(mutated[at...])
                }
            }
            tokens.append(mutated)
        }
        // Short tokens with dots everywhere, including around the eight-byte words the searches step by.
        for length in 0..<20 {
            for first in 0..<length {
                for second in first..<length {
                    var short = [UInt8](repeating: UInt8(ascii: "A"), count: length)
                    short[first] = UInt8(ascii: ".")
                    short[second] = UInt8(ascii: ".")
                    tokens.append(short)
                }
            }
        }
        // Junk without two dots (refused where the bytes lie), and bytes outside the alphabet at either end (looked for
        // before anything else): the same refusals as the alphabet check then the exact parse.
        let junk = [
            "", "abc", "not a token at all", "a b", "a.b", "a.b ", " a.b.c", "\na.b.c", "a.b.c\n", "\"a.b.c\"", "a!b", "é", "a.é", "é.a",
            ".", "..", "e30.e30.e30.e30", "e30.e30.e30 ", "e30.e30.", ".e30.e30", token + "\n", " " + token, token + "=",
        ]
        tokens += junk.map { Array($0.utf8) }
        // The same with the original token's header known (as after it verified): a header taken from there must be
        // the one a parse gives, and every refusal the same.
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [key])
        let known = VerifiedHeaders()
        let original = try CompactJWS.parse(bytes, maxBytes: 16384)
        known.keep(original.header, encoded: original.encodedHeader)
        #expect(known.count == 1)
        var accepted = 0
        var fromKnown = 0
        for candidate in tokens {
            let fast = outcome { () throws(VerificationError) in try CompactJWS.parse(candidate, maxBytes: 16384) }
            let exact = outcome { () throws(VerificationError) in try CompactJWS.parseExactly(candidate) }
            let withKnown = outcome { () throws(VerificationError) in try CompactJWS.parse(candidate, maxBytes: 16384, knownHeaders: known) }
            #expect(fast == exact, "\(String(decoding: candidate, as: UTF8.self))")
            #expect(withKnown == exact, "\(String(decoding: candidate, as: UTF8.self))")
            if fast.hasPrefix("ok") { accepted += 1 }
            if (try? CompactJWS.parse(candidate, maxBytes: 16384, knownHeaders: known))?.headerWasKnown == true { fromKnown += 1 }
            // The verifier's own order (the alphabet looked for before the exact parse words a refusal) answers as the
            // alphabet check followed by the parse.
            let text = String(decoding: candidate, as: UTF8.self)
            let ordered = outcome { () throws(VerificationError) in try verifier.parseCheckingBytes(text, knownHeaders: known) }
            let plain = outcome { () throws(VerificationError) in
                try verifier.checkBytes(text)
                return try verifier.parse(text)
            }
            #expect(ordered == plain, "\(text)")
        }
        #expect(accepted > 0 && fromKnown > 0, "some mutations still parse, some with the known header, so every branch was compared")
    }

    @Test("the signature is decoded before the payload: every refusal is still the one the plain order gives")
    func signatureFirstRefusals() throws {
        let key = try SharedTestKeys.rsa()
        let token = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let (header, payload, signature) = (parts[0], parts[1], parts[2])
        // An RSA-2048 signature is 342 characters, whose last holds 2 bits: "B" sets a trailing one (alphabet only,
        // but not canonical).
        #expect(signature.utf8.count % 4 == 2)
        let lastBits = "B"
        let alphabet = CompactJWSAlphabet.refusal
        let cases: [(String, String)] = [
            (header + "." + payload + "." + signature.dropLast() + "!", alphabet),  // an altered last byte
            (header + "." + payload + "." + signature.dropLast() + "é", alphabet),
            (header + "." + payload + "." + signature.dropLast() + "=", alphabet),
            // A byte outside the alphabet in the signature wins over a payload that also fails (here: holds a dot).
            (header + "." + payload.prefix(8) + "." + payload.dropFirst(8) + "." + signature + "!", alphabet),
            (header + "." + payload.prefix(8) + "!" + payload.dropFirst(9) + "." + signature.dropLast() + "!", alphabet),
            // A non-canonical signature (alphabet only): the payload's bad byte is still found, and so is its dot.
            (header + "." + payload.prefix(8) + "!" + payload.dropFirst(9) + "." + signature.dropLast() + lastBits, alphabet),
            (header + "." + payload.prefix(8) + "." + payload.dropFirst(9) + "." + signature.dropLast() + lastBits, "found more"),
            (header + "." + payload + "." + signature.dropLast() + lastBits, "the signature is not canonical"),
            // A signature of impossible length (345 characters) after a payload with a bad byte, and after a good one.
            (header + "." + payload.prefix(8) + "!" + payload.dropFirst(9) + "." + signature + "AAA", alphabet),
            (header + "." + payload + "." + signature + "AAA", "the signature is not canonical"),
            (header + "." + payload.dropLast() + "." + signature.dropLast() + "!", alphabet),
            (header + "." + payload.dropLast() + "." + signature.dropLast() + lastBits, "the payload is not canonical"),
        ]
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [key])
        let known = VerifiedHeaders()
        let original = try CompactJWS.parse(Array(token.utf8), maxBytes: 16384)
        known.keep(original.header, encoded: original.encodedHeader)
        for (candidate, expected) in cases {
            for headers in [nil, known] {
                let ordered = outcome { () throws(VerificationError) in try verifier.parseCheckingBytes(candidate, knownHeaders: headers) }
                let plain = outcome { () throws(VerificationError) in
                    try verifier.checkBytes(candidate)
                    return try verifier.parse(candidate)
                }
                #expect(ordered == plain, "\(candidate)")
                #expect(ordered.hasPrefix("malformed_token") && ordered.contains(expected), "\(candidate): \(ordered)")
                let exact = outcome { () throws(VerificationError) in try CompactJWS.parseExactly(Array(candidate.utf8)) }
                let fast = outcome { () throws(VerificationError) in
                    try CompactJWS.parse(Array(candidate.utf8), maxBytes: 16384, knownHeaders: headers)
                }
                #expect(fast == exact, "\(candidate)")
            }
        }
    }

    @Test("the header is read in one visit: escaped names count, key references are listed in a fixed order")
    func headerOnePass() throws {
        func header(_ json: String) throws(VerificationError) -> JOSEHeader {
            try CompactJWS.parse(Array((Base64URL.encode(Array(json.utf8)) + ".e30.c2ln").utf8), maxBytes: 16384).header
        }
        let escaped = try header(#"{"\u0061lg":"RS256","k\u0069d":"k1","typ":"JWT"}"#)
        #expect(escaped.algorithm == "RS256" && escaped.keyID == "k1" && escaped.type == "JWT" && !escaped.hasNonce)
        let references = try header(#"{"x5c":[],"nonce":"n","alg":"ES256","jku":"u","x5u":"u","jwk":{}}"#)
        #expect(references.ignoredKeyReferences == ["jwk", "jku", "x5u", "x5c"])
        #expect(references.hasNonce && references.keyID == nil && references.type == nil)
        let refusals: [(String, String)] = [
            (#"{"kid":"k"}"#, "the header has no alg"),
            (#"{"alg":1}"#, "the header alg is not a string"),
            (#"{"alg":"RS256","kid":1}"#, "the header kid is not a string"),
            (#"{"alg":"RS256","typ":null}"#, "the header typ is not a string"),
            (#"{"alg":"RS256","crit":[]}"#, "the header crit must be a non-empty array"),
            (#"{"alg":"RS256","crit":["b64"]}"#, "critical"),
            (#"{"alg":"RS256","alg":"RS256"}"#, "not a valid JSON object"),
            (#"{"alg":"RS256","\u0061lg":"none"}"#, "not a valid JSON object"),
        ]
        for (json, message) in refusals {
            do throws(VerificationError) {
                _ = try header(json)
                Issue.record("\(json) was accepted")
            } catch {
                #expect(error.code == .malformedToken && error.message.contains(message), "\(json): \(error.message)")
            }
        }
    }

    @Test("ASCII.lowercased(_:hasBytesOf:) agrees with lowercasing and comparing bytes")
    func caseFoldedComparison() {
        let samples = [
            "", "jwt", "JWT", "Jwt", "application/jwt", "Application/JWT", "at+jwt", "AT+JWT", "jwt ", "jẘt", "JẘT", "ǰwt", "\u{212A}", "k", "K",
        ]
        for text in samples {
            for other in samples {
                #expect(ASCII.lowercased(text, hasBytesOf: other) == ASCII.lowercased(text).sameBytes(as: other), "\(text) / \(other)")
            }
        }
    }

    @Test("keys are grouped by the bytes of their kid: equal kids are all tried, Unicode-equal ones are not the same")
    func keyGroups() throws {
        let first = try TestKey(.rsa(bits: 2048), keyID: "same")
        let second = try TestKey(.rsa(bits: 2048), keyID: "same")
        let composed = try TestKey(.rsa(bits: 2048), keyID: "caf\u{E9}")
        let set = try SharedTestKeys.keySet([first, second, composed])
        #expect(set.candidates(keyID: "same", algorithm: .rs256).count == 2)
        #expect(set.candidates(keyID: "cafe\u{301}", algorithm: .rs256).isEmpty, "NFD is other bytes than NFC")
        #expect(set.contains(keyID: "caf\u{E9}") && !set.contains(keyID: "cafe\u{301}"))
        // A token signed by the second key of the group verifies: the first key's failure does not end the search.
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [first, second])
        let token = try second.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        #expect(verifier.verify(token: token, nonce: "n", at: Verifiers.now).verdict != nil)
        let forged = try TestKey(.rsa(bits: 2048), keyID: "same").sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        #expect(verifier.verify(token: forged, nonce: "n", at: Verifiers.now).code == .invalidSignature)
    }

    @Test("the cache's token key: hashed over the length and last 16 bytes, equal only for the same bytes anywhere")
    func tokenKey() {
        typealias Key = VerifiedTokenCache.TokenKey
        func hash(_ key: Key) -> Int {
            var hasher = Hasher()
            key.hash(into: &hasher)
            return hasher.finalize()
        }
        for length in [0, 1, 15, 16, 17, 63, 64, 65, 950] {
            let token = String((0..<length).map { Character(Unicode.Scalar(UInt8(0x41 + $0 % 26))) })
            let same = Key(token: String(decoding: Array(token.utf8), as: UTF8.self))
            #expect(Key(token: token) == same && hash(Key(token: token)) == hash(same), "length \(length)")
            // Same length and tail, one byte other anywhere before it (or in it): another token, never a hit.
            for position in Set([0, length / 2, length - 17, length - 16, length - 1]) where position >= 0 && position < length {
                var bytes = Array(token.utf8)
                bytes[position] = UInt8(ascii: "z")
                #expect(Key(token: token) != Key(token: String(decoding: bytes, as: UTF8.self)), "length \(length) position \(position)")
            }
            #expect(Key(token: token) != Key(token: token + "A"))
        }
        // Unicode equivalence is not equality: KELVIN SIGN is not K.
        #expect(Key(token: String(repeating: "a", count: 20) + "K") != Key(token: String(repeating: "a", count: 20) + "\u{212A}"))
    }

    @Test("every algorithm has its own slot in the per-algorithm tables")
    func algorithmOrdinals() {
        for (index, algorithm) in SignatureAlgorithm.allCases.enumerated() { #expect(algorithm.ordinal == index) }
    }

    @Test("a verdict's JSON is written once and read the same from many threads; a change to extra writes it anew")
    func verdictJSONShared() async throws {
        let key = try SharedTestKeys.rsa()
        let verifier = try Verifiers.make(Verifiers.apple(), keys: [key])
        let token = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        let verdict = try #require(verifier.verify(token: token, nonce: "n", at: Verifiers.now).verdict)
        let expected = JSONWriter.bytes(.object(verdict.json))
        let seen = await withTaskGroup(of: [UInt8].self) { group in
            for _ in 0..<16 { group.addTask { verdict.jsonBytes } }
            var all: [[UInt8]] = []
            for await bytes in group { all.append(bytes) }
            return all
        }
        #expect(seen.allSatisfy { $0 == expected })
        var changed = verdict
        changed.extra.set("login", .string("limited"))
        #expect(changed.jsonBytes == JSONWriter.bytes(.object(changed.json)))
        #expect(changed.jsonBytes != verdict.jsonBytes && verdict.jsonBytes == expected, "the original keeps its own text")
    }

    @Test("only headers of tokens that verified are kept, at most four, each for its exact bytes")
    func verifiedHeadersKept() throws {
        let key = try SharedTestKeys.rsa()
        let keys = try SharedTestKeys.keySet([key])
        let verifier = TokenVerifier(policy: Verifiers.apple(), keySource: InMemoryKeySource(keys))
        let claims = ProviderTokens.apple(now: Verifiers.now, rawNonce: "n")
        let forged = try TestKey(.rsa(bits: 2048), keyID: key.keyID).sign(claims)
        #expect(verifier.verify(token: forged, nonce: "n", at: Verifiers.now).code == .invalidSignature)
        let expired = try key.sign(ProviderTokens.apple(now: Verifiers.now - 10 * 86_400, rawNonce: "n"))
        #expect(verifier.verify(token: expired, nonce: "n", at: Verifiers.now).code == .tokenExpired)
        #expect(keys.verifiedHeaders.count == 0, "a forged or refused token leaves nothing behind")
        // Six distinct headers (same meaning, other bytes): the first four that verify are kept, and every token,
        // kept header or not, gets the same verdict as its first verification.
        var verdicts: [[UInt8]] = []
        for extra in 0..<6 {
            let token = try key.sign(claims, extraHeader: [("x\(extra)", .integer(Int64(extra)))])
            let first = try #require(verifier.verify(token: token, nonce: "n", at: Verifiers.now).verdict)
            let again = try #require(verifier.verify(token: token, nonce: "n", at: Verifiers.now).verdict)
            #expect(first.jsonBytes == again.jsonBytes)
            verdicts.append(first.jsonBytes)
            // A forgery under a kept header still fails: the signature covers the header's bytes as received.
            let parts = token.split(separator: ".")
            let otherParts = forged.split(separator: ".")
            let spliced = "\(parts[0]).\(parts[1]).\(otherParts[2])"
            #expect(verifier.verify(token: spliced, nonce: "n", at: Verifiers.now).code == .invalidSignature)
            let alteredPayload = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "m")).split(separator: ".")[1]
            #expect(verifier.verify(token: "\(parts[0]).\(alteredPayload).\(parts[2])", nonce: "m", at: Verifiers.now).code == .invalidSignature)
        }
        #expect(keys.verifiedHeaders.count == VerifiedHeaders.capacity)
        #expect(Set(verdicts.map { $0 }).count == 1, "the header does not reach the verdict")
    }

    @Test("the plain-run search never passes a quote, backslash, control or non-ASCII byte, and stops on the first one of a whole word")
    func plainRunEndIsExact() {
        var random = SeededRandom(seed: 11)
        let specials: [UInt8] = [0x22, 0x5C, 0x00, 0x01, 0x1F, 0x80, 0xC3, 0xFF]
        let plain: [UInt8] = [0x20, 0x21, 0x23, 0x41, 0x5B, 0x5D, 0x61, 0x7E, 0x7F]
        func isSpecial(_ byte: UInt8) -> Bool { byte == 0x22 || byte == 0x5C || byte < 0x20 || byte >= 0x80 }
        for round in 0..<30000 {
            // Short runs, and long ones with few specials (the four-word steps).
            let count = round % 3 == 2 ? Int.random(in: 0...200, using: &random) : Int.random(in: 0...40, using: &random)
            let odds = round % 3 == 2 ? 60 : 6
            let bytes = (0..<count).map { _ in
                Int.random(in: 0..<odds, using: &random) == 0 ? specials.randomElement(using: &random)! : plain.randomElement(using: &random)!
            }
            let start = Int.random(in: 0...count, using: &random)
            let end = bytes.withUnsafeBufferPointer { JSONParser.Cursor.plainRunEnd($0, from: start) }
            let longEnd = bytes.withUnsafeBufferPointer { JSONParser.Cursor.plainRunEndOfLongRun($0, from: start) }
            let first = bytes[start...].firstIndex(where: isSpecial) ?? count
            // The whole words from `start` before the one holding the first special byte (or the end) are skipped; in that
            // word, the search stops on the byte itself when the word is whole (little-endian), else at the word's start.
            let wordStart = start + (first - start) / 8 * 8
            let expected = first < count && wordStart + 8 <= count && Int(littleEndian: 1) == 1 ? first : wordStart
            #expect(end == expected, "\(bytes) from \(start)")
            #expect(longEnd == expected, "\(bytes) from \(start), long-run steps")
        }
    }

    @Test("a verdict keeps the decoded segments, not another copy of the token (a cached verdict lives as long as its entry)")
    func verdictKeepsNoTokenCopy() throws {
        let key = try SharedTestKeys.rsa()
        let token = try key.sign(ProviderTokens.apple(now: Verifiers.now, rawNonce: "n"))
        let jws = try CompactJWS.parse(Array(token.utf8), maxBytes: 16384)
        // The payload is a slice of the buffer the claims keep: it must start right after the decoded header, not
        // after a copy of the token's ~1,000 bytes (which every cache entry would then hold twice).
        #expect(jws.payload.startIndex <= jws.encodedHeader.count)
    }

    @Test("every claim in the verifier's table is found by its name, escaped or not, and near misses are not")
    func claimTable() throws {
        for claim in ClaimName.allCases {
            let name = claim.text
            var members = [#""\#(name)":1"#]
            // The same name with its first letter escaped, and names one byte off (longer, shorter, last byte changed).
            let escaped = "\\u00" + String(name.utf8.first!, radix: 16) + name.dropFirst()
            members.append(#""x":2"#)
            let object = try IndexedJSONObject(Array(("{" + members.joined(separator: ",") + "}").utf8))
            #expect(ClaimsReader(claims: object).value(claim) == .integer(1), "\(name)")
            let viaEscape = try IndexedJSONObject(Array(#"{"\#(escaped)":3}"#.utf8))
            #expect(ClaimsReader(claims: viaEscape).value(claim) == .integer(3), "\(name) escaped")
            var last = Array(name.utf8)
            last[last.count - 1] ^= 0x01
            for near in [name + "x", String(name.dropLast()), String(decoding: last, as: UTF8.self), name.uppercased()] {
                let other = try IndexedJSONObject(Array(#"{"\#(near)":4}"#.utf8))
                let reader = ClaimsReader(claims: other)
                #expect(ClaimName.allCases.allSatisfy { reader.value($0) == other[$0.text] }, "\(near)")
                #expect(reader.value(claim) == nil, "\(near) is not \(name)")
            }
        }
    }
}
