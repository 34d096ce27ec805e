import Glibc

/// Equality of two long byte runs through the C library's `memcmp`, which compares a vector register at a time: a
/// verified-token cache hit compares the whole token (about 1 KB), and a word-at-a-time loop spent 0.7 k
/// instructions on it. Not for secrets: it stops at the first block that differs (see ``ConstantTime``).
public enum MemoryCompare {
    public static func equal(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        guard left.count == right.count else { return false }
        guard let l = left.baseAddress, let r = right.baseAddress, left.count > 0 else { return true }
        return unsafe memcmp(l, r, left.count) == 0
    }
}
