import Testing
import TokenGuardCore

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
}
