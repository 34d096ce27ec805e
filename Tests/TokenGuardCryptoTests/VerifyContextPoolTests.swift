import Dispatch
import Synchronization
import Testing

@testable import TokenGuardCrypto

@Suite("The lock-free pool of a key's verification contexts")
struct VerifyContextPoolTests {
    /// Takes `depth` contexts at once (each verification nested in the one before), recording the ones handed out.
    static func nested(_ key: PublicKey, depth: Int, _ seen: inout [OpaquePointer]) {
        guard depth > 0 else { return }
        var inner = seen
        _ = key.withVerifyContext(for: .rs256) { context in
            inner.append(context.verify)
            nested(key, depth: depth - 1, &inner)
            return true
        }
        seen = inner
    }

    @Test("a context is never handed to two verifications at once; put back, it is used again, and at most 64 are kept idle")
    func oneHolderAtATime() throws {
        let key = try SigningKey(generating: .rsa(bits: 2048)).publicKey()
        let kept = VerifyContextPool.slotsPerAlgorithm
        var first: [OpaquePointer] = []
        Self.nested(key, depth: kept + 6, &first)
        #expect(first.count == kept + 6)
        #expect(Set(first.map(UInt.init(bitPattern:))).count == kept + 6, "verifications at once hold distinct contexts")
        // `kept` were kept when they came back (the rest freed): as many at once now get exactly those again.
        var second: [OpaquePointer] = []
        Self.nested(key, depth: kept, &second)
        #expect(Set(second.map(UInt.init(bitPattern:))).count == kept)
        #expect(Set(second.map(UInt.init(bitPattern:))).isSubset(of: Set(first.map(UInt.init(bitPattern:)))))
        // One at a time, the same idle context serves every verification.
        var single: Set<UInt> = []
        for _ in 0..<10 {
            _ = key.withVerifyContext(for: .rs256) { context in
                single.insert(UInt(bitPattern: context.verify))
                return true
            }
        }
        #expect(single.count == 1)
    }

    @Test("eight threads verifying with one key at once get every answer right (a shared context would garble some)")
    func concurrentVerifications() throws {
        let signer = try SigningKey(generating: .rsa(bits: 2048))
        let key = try signer.publicKey()
        let messages = (0..<16).map { Array("message \($0)".utf8) }
        let signatures = try messages.map { try signer.sign($0, algorithm: .rs256) }
        let wrong = Atomic(0)
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<300 {
                let index = (thread + round) % messages.count
                // Every third check pairs a message with another's signature: it must fail.
                let signature = round % 3 == 0 ? signatures[(index + 1) % messages.count] : signatures[index]
                let verified =
                    (try? SignatureVerifier.verify(signature: signature, message: messages[index], key: key, algorithm: .rs256).get()) != nil
                if verified != (round % 3 != 0) { wrong.add(1, ordering: .relaxed) }
            }
        }
        #expect(wrong.load(ordering: .relaxed) == 0)
    }
}
