public enum ConstantTime {
    /// Compares two byte strings without an early exit, so the time taken does not reveal where they differ.
    ///
    /// Lengths are compared first; that leaks only the length, which for a SHA-256 hex nonce is public.
    ///
    /// Eight bytes at a time: the differences are ORed into one word and looked at once, after the last byte, so the
    /// loop's path depends on the length alone. (OpenSSL's `CRYPTO_memcmp` does the same a byte at a time: 450
    /// instructions for a 64-byte hex nonce, where this takes about 60.)
    public static func equals(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let l = unsafe a.baseAddress, let r = unsafe b.baseAddress, a.count > 0 else { return true }
        let left = unsafe UnsafeRawPointer(l)
        let right = unsafe UnsafeRawPointer(r)
        let count = a.count
        var difference: UInt64 = 0
        var offset = 0
        while offset &+ 8 <= count {
            difference |=
                unsafe left.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                ^ right.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            offset &+= 8
        }
        while offset < count {
            difference |= UInt64(unsafe l[offset] ^ r[offset])
            offset &+= 1
        }
        return difference == 0
    }

    /// The same over two strings' UTF-8 bytes (not generic: a cached verdict's nonce is compared on every hit).
    public static func equals(_ a: String, _ b: String) -> Bool {
        // Native strings' bytes in place: copying them into `var`s for `withUTF8` cost a retain and release each.
        if let inPlace = unsafe a.utf8.withContiguousStorageIfAvailable({ left in
            unsafe b.utf8.withContiguousStorageIfAvailable { right in unsafe equals(left, right) }
        }), let result = inPlace {
            return result
        }
        var a = a
        var b = b
        return a.withUTF8 { left in b.withUTF8 { right in unsafe equals(left, right) } }
    }

    /// The same over any byte collections (copied when not contiguous).
    public static func equals<A: Collection<UInt8>, B: Collection<UInt8>>(_ a: A, _ b: B) -> Bool {
        // Contiguous bytes (a native String's UTF-8, an array) are compared in place, without copies.
        if let inPlace = a.withContiguousStorageIfAvailable({ left in
            b.withContiguousStorageIfAvailable { right in unsafe equals(left, right) }
        }), let result = inPlace {
            return result
        }
        return unsafe Array(a).withUnsafeBufferPointer { left in unsafe Array(b).withUnsafeBufferPointer { right in unsafe equals(left, right) } }
    }
}
