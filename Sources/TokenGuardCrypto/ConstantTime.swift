import COpenSSL

public enum ConstantTime {
    /// Compares two byte strings without an early exit, so the time taken does not reveal where they differ.
    ///
    /// Lengths are compared first; that leaks only the length, which for a SHA-256 hex nonce is public.
    public static func equals(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let l = a.baseAddress, let r = b.baseAddress, a.count > 0 else { return true }
        return unsafe CRYPTO_memcmp(l, r, a.count) == 0
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
            b.withContiguousStorageIfAvailable { right in
                guard left.count == right.count else { return false }
                guard let l = left.baseAddress, let r = right.baseAddress, left.count > 0 else { return true }
                return unsafe CRYPTO_memcmp(l, r, left.count) == 0
            }
        }), let result = inPlace {
            return result
        }
        let left = Array(a)
        let right = Array(b)
        guard left.count == right.count else { return false }
        if left.isEmpty { return true }
        return unsafe left.withUnsafeBytes { l in
            unsafe right.withUnsafeBytes { r in
                unsafe CRYPTO_memcmp(l.baseAddress, r.baseAddress, left.count) == 0
            }
        }
    }
}
