import Testing
import TokenGuardCrypto

@Suite("Constant-time comparison of secrets and nonces")
struct ConstantTimeTests {
    @Test("equal exactly when the bytes are: every length to 80, a difference at every position and in every bit")
    func everyPositionAndBit() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...80 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(ConstantTime.equals(bytes, Array(bytes)))
            for position in 0..<length {
                for bit in 0..<8 {
                    var other = bytes
                    other[position] ^= 1 << bit
                    #expect(!ConstantTime.equals(bytes, other), "length \(length), byte \(position), bit \(bit)")
                    #expect(!ConstantTime.equals(other, bytes))
                }
            }
            // A prefix or an extension is never equal, whatever its bytes.
            if length > 0 { #expect(!ConstantTime.equals(bytes, Array(bytes.dropLast()))) }
            #expect(!ConstantTime.equals(bytes, bytes + [0]))
        }
    }

    @Test("slices at odd offsets (unaligned words), strings as their UTF-8 bytes")
    func unalignedAndStrings() {
        let base = Array("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef!".utf8)
        for offset in 0..<8 {
            let left = base[offset..<(offset + 40)]
            let right = Array(base[offset..<(offset + 40)])
            #expect(ConstantTime.equals(left, right))
            var changed = right
            changed[39] = UInt8(ascii: "X")
            #expect(!ConstantTime.equals(left, changed))
        }
        // Bytes, not characters: "é" precomposed and decomposed are different nonces.
        #expect(!ConstantTime.equals("caf\u{E9}", "cafe\u{301}"))
        #expect(ConstantTime.equals("K", "K"))
        #expect(!ConstantTime.equals("K", "\u{212A}"))
        #expect(ConstantTime.equals("", ""))
    }
}
