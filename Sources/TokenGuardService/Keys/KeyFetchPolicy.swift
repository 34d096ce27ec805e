import TokenGuardCore

/// How a fetching key source caches, refreshes and tolerates failures (config: `keys:`).
package struct KeyFetchPolicy: Sendable, Equatable {
    /// `Cache-Control: max-age` is clamped to at least this (default 5 min)…
    package var minimumTTL: Double = 300
    /// …and at most this (default 24 h); also the TTL when the provider sends none.
    package var maximumTTL: Double = 86_400
    /// At most one unknown-`kid` refetch per provider per this many seconds (default 30 s).
    package var unknownKeyCooldown: Double = 30
    /// Keys last fetched longer ago than this are no longer used: `keys_unavailable` (default 24 h).
    package var maximumStaleAge: Double = 86_400
    /// First retry delay after a failed fetch; doubles per failure up to `maximumBackoff` (defaults 1 s, 5 min).
    package var initialBackoff: Double = 1
    package var maximumBackoff: Double = 300
    /// The longest retry delay while no usable keys are in hand (default 30 s, ±10 %).
    package var maximumBackoffWithoutKeys: Double = 30
    /// A JWKS document larger than this is refused (1 MiB).
    package var maximumDocumentBytes = KeySet.maximumDocumentBytes

    package init() {}

    /// The TTL for a response's `Cache-Control`, clamped to [minimumTTL, maximumTTL].
    package func ttl(cacheControl: String?) -> Double {
        guard let cacheControl, let maxAge = Self.maxAge(cacheControl) else { return maximumTTL }
        return min(max(Double(maxAge), minimumTTL), maximumTTL)
    }

    /// `max-age` from a Cache-Control header (every line of it, joined with commas), read as bytes;
    /// `no-store`/`no-cache` count as 0 (then clamped up to the minimum). A `max-age` without a plain decimal value
    /// (`max-age`, `max-age=x`, `max-age=1.5`) counts as 0 too (RFC 9111 §4.2.1: invalid freshness information is
    /// stale), not as no header (which would mean the longest TTL), and so does a header with a byte outside
    /// printable ASCII; spaces around `=` are tolerated; of several, the shortest counts.
    static func maxAge(_ header: String) -> Int? {
        let bytes = Array(header.utf8)
        guard bytes.allSatisfy({ ($0 >= 0x20 && $0 < 0x7F) || $0 == 0x09 }) else { return 0 }
        func trimmed(_ part: ArraySlice<UInt8>, also extra: UInt8 = 0x20) -> ArraySlice<UInt8> {
            let isTrimmed = { (byte: UInt8) in byte == 0x20 || byte == 0x09 || byte == extra }
            guard let first = part.firstIndex(where: { !isTrimmed($0) }), let last = part.lastIndex(where: { !isTrimmed($0) }) else { return [] }
            return part[first...last]
        }
        var result: Int? = nil
        for directive in bytes.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            let parts = directive.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = trimmed(parts[0]).map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }
            if name.elementsEqual("no-store".utf8) || name.elementsEqual("no-cache".utf8) { return 0 }
            guard name.elementsEqual("max-age".utf8) else { continue }
            let value = parts.count == 2 ? trimmed(trimmed(parts[1]), also: UInt8(ascii: "\"")) : []
            var seconds = 0
            if !value.isEmpty, value.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
                let digits = value.drop { $0 == 0x30 }
                // Capped before converting so a huge value cannot overflow (it is clamped to the maximum TTL anyway).
                seconds = digits.count <= 12 ? digits.reduce(0) { $0 * 10 + Int($1 - 0x30) } : 999_999_999_999
            }
            result = min(result ?? seconds, seconds)
        }
        return result
    }

    /// The delay before retry `failures` (1-based): initialBackoff × 2^(failures−1), capped, then ±10 % jitter.
    ///
    /// | failures | 1 | 2 | 3 | 4 | … | 9+ |
    /// |---|---|---|---|---|---|---|
    /// | delay (defaults) | 1 s | 2 s | 4 s | 8 s | … | 300 s |
    package func backoff(failures: Int, jitter: Double) -> Double {
        let exponent = Double(min(max(failures - 1, 0), 30))  // capped before pow, so no overflow
        let base = min(initialBackoff * pow2(exponent), maximumBackoff)
        return base * (1 + 0.1 * (jitter * 2 - 1))
    }

    private func pow2(_ exponent: Double) -> Double {
        var value = 1.0
        for _ in 0..<Int(exponent) { value *= 2 }
        return value
    }
}
