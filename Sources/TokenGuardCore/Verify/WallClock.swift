/// The one source of "now": verification, key freshness, caches, the replay store and opaque-answer expiry all
/// read the clock the composition root hands them, so a test moves time for the whole service at once.
public struct WallClock: Sendable {
    private let read: @Sendable () -> Double

    /// A clock reading Unix seconds from `read`.
    public init(_ read: @escaping @Sendable () -> Double) { self.read = read }

    /// A clock that always says `seconds` (tests, verification of a log as of one moment).
    public static func fixed(_ seconds: Int64) -> WallClock { WallClock { Double(seconds) } }

    /// Unix seconds, with the fraction.
    public var now: Double { read() }

    /// Whole Unix seconds (a non-finite or absurd reading counts as 0 or the latest accepted date, never a trap).
    public var seconds: Int64 {
        let value = read()
        guard value.isFinite else { return 0 }
        return Int64(min(max(value, 0), Double(NumericDate.maximum)).rounded(.down))
    }
}
