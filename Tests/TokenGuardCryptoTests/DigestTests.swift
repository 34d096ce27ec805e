import Testing
import TokenGuardCrypto

@Suite("SHA-256 outside the signature check (nonces, replay keys)")
struct DigestTests {
    @Test("FIPS 180-4 examples, and one million a's")
    func knownDigests() {
        let examples: [(String, String)] = [
            ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
            ),
            (String(repeating: "a", count: 1_000_000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        ]
        for (message, expected) in examples {
            #expect(SHA256.hexDigest(message.utf8) == expected, "\(message.prefix(8)) (\(message.utf8.count) bytes)")
            #expect(Hex.lowercase(SHA256.hash(Array(message.utf8))) == expected)
        }
    }

    @Test("the hex written in place is the hex of the digest, for every byte value and length")
    func hexInPlace() {
        var generator = SystemRandomNumberGenerator()
        var seen = Set<UInt8>()
        for length in 0..<300 {
            let message = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let digest = SHA256.hash(message)
            seen.formUnion(digest)
            let inPlace = SHA256.withHexDigest(of: message) { String(decoding: $0, as: UTF8.self) }
            #expect(inPlace == Hex.lowercase(digest))
            #expect(inPlace.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) } && inPlace.utf8.count == 64)
        }
        #expect(seen.count == 256)
    }

    @Test("the nonce rule: the lowercase hex of the digest matches, any other bytes or length do not")
    func hexDigestEquals() {
        var generator = SystemRandomNumberGenerator()
        for length in [0, 1, 31, 32, 55, 56, 64, 65, 300] {
            let message = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let hex = Array(Hex.lowercase(SHA256.hash(message)).utf8)
            func matches(_ claimed: [UInt8]) -> Bool {
                message.withUnsafeBufferPointer { bytes in claimed.withUnsafeBufferPointer { SHA256.hexDigest(of: bytes, equals: $0) } }
            }
            #expect(matches(hex), "\(length) bytes")
            // Every position altered, upper case, one byte short or long, empty: no match.
            for index in hex.indices {
                var altered = hex
                altered[index] = altered[index] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
                #expect(!matches(altered), "\(length) bytes, position \(index)")
            }
            #expect(!matches(Array(String(decoding: hex, as: UTF8.self).uppercased().utf8)) || !hex.contains { $0 >= UInt8(ascii: "a") })
            #expect(!matches(Array(hex.dropLast())) && !matches(hex + [UInt8(ascii: "0")]) && !matches([]))
            #expect(!matches(message) || message == hex)
        }
    }
}
