import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// The byte primitives behind "tokens are bytes": exhaustive over bytes and positions.
struct ByteIdentityPrimitiveTests {
    static let allowed = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.".utf8))

    @Test("the alphabet admits exactly A–Z a–z 0–9 - _ . at every position of a token")
    func alphabet() {
        let base = Array(repeating: UInt8(ascii: "A"), count: 37)
        for byte in UInt8.min...UInt8.max {
            #expect(CompactJWSAlphabet.isAllowed(byte) == Self.allowed.contains(byte))
            for position in 0..<37 {
                var bytes = base
                bytes[position] = byte
                let token = String(decoding: bytes, as: UTF8.self)
                // Bytes from 0x80 decode to U+FFFD (three bytes above 0x7F), never to an allowed byte.
                #expect(CompactJWSAlphabet.admits(token) == Self.allowed.contains(byte), "byte \(byte) at \(position)")
            }
        }
        // Every allowed byte in every lane of a word, and all of them together.
        let alphabet = Array(Self.allowed).sorted()
        for rotation in 0..<alphabet.count {
            let bytes = Array(alphabet[rotation...] + alphabet[..<rotation])
            #expect(CompactJWSAlphabet.admits(String(decoding: bytes, as: UTF8.self)))
        }
        #expect(CompactJWSAlphabet.admits(""))
        #expect(!CompactJWSAlphabet.admits("abc\u{212A}"))
    }

    @Test("sameBytes finds a difference at any position and any length, and ignores Unicode equivalence")
    func sameBytes() {
        // Past the four-word steps, the single words and the bytes, and at a token's length.
        for length in Array(0...100) + [127, 128, 129, 1000] {
            let text = String(repeating: "x", count: length)
            #expect(text.sameBytes(as: String(repeating: "x", count: length)))
            for position in 0..<length {
                var bytes = Array(text.utf8)
                bytes[position] = UInt8(ascii: "y")
                #expect(!text.sameBytes(as: String(decoding: bytes, as: UTF8.self)), "length \(length) position \(position)")
            }
            #expect(!text.sameBytes(as: text + "x"))
        }
        #expect(!"K".sameBytes(as: "\u{212A}"))
        #expect("\u{212A}" == "K")
        #expect(!"\u{E9}".sameBytes(as: "e\u{301}"))
    }

    @Test("header names equal up to ASCII letter case only: every byte pair against the rule, in place and bridged")
    func equalIgnoringCase() {
        func reference(_ a: [UInt8], _ b: [UInt8]) -> Bool {
            a.count == b.count
                && zip(a, b).allSatisfy { x, y in
                    x == y || (x >= 0x41 && x <= 0x5A && x + 0x20 == y) || (y >= 0x41 && y <= 0x5A && y + 0x20 == x)
                }
        }
        // Every pair of single bytes (the letters, their neighbours '@' '[' '`' '{', and bytes whose 0x20 bit alone
        // differs without being letters), then seeded names of mixed case and length.
        for x in 0..<128 {
            for y in 0..<128 {
                let a = [UInt8(x)]
                let b = [UInt8(y)]
                #expect(
                    ASCII.equalIgnoringCase(String(decoding: a, as: UTF8.self), String(decoding: b, as: UTF8.self)) == reference(a, b),
                    "\(x) \(y)")
            }
        }
        var random = SeededRandom(seed: 0xCA5E)
        let alphabet = Array("aAzZ-_0@[`{x-Tokenguard-NONCE".utf8)
        for _ in 0..<5_000 {
            let length = Int(random.next() % 24)
            let a = (0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            var b = a.map { byte in random.next() % 3 == 0 ? (byte ^ 0x20) : byte }
            if random.next() % 4 == 0, !b.isEmpty { b.removeLast() }
            let left = String(decoding: a, as: UTF8.self)
            let right = String(decoding: b, as: UTF8.self)
            #expect(ASCII.equalIgnoringCase(left, right) == reference(a, b), "\(left.debugDescription) \(right.debugDescription)")
        }
        #expect(!ASCII.equalIgnoringCase("K", "\u{212A}"))
        #expect(ASCII.equalIgnoringCase("Authorization", "authorization"))
    }
}
