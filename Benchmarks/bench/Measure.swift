import Dispatch
import Foundation
import Synchronization
import TokenGuardSync

/// Timing helpers: every rate is calls per second over a measured wall-clock interval after a warm-up.
enum Measure {
    /// Runs `body` repeatedly for `seconds` after a short warm-up; returns calls per second. A failing call aborts.
    static func rate(seconds: Double, _ body: () -> Bool) -> Double {
        for _ in 0..<50 { guard body() else { return -1 } }
        var calls = 0
        let start = DispatchTime.now().uptimeNanoseconds
        let budget = UInt64(seconds * 1e9)
        var elapsed: UInt64 = 0
        while elapsed < budget {
            for _ in 0..<64 where !body() { return -1 }
            calls += 64
            elapsed = DispatchTime.now().uptimeNanoseconds - start
        }
        return Double(calls) / (Double(elapsed) / 1e9)
    }

    static func rateAsync(seconds: Double, _ body: () async -> Bool) async -> Double {
        for _ in 0..<50 { guard await body() else { return -1 } }
        var calls = 0
        let start = DispatchTime.now().uptimeNanoseconds
        let budget = UInt64(seconds * 1e9)
        var elapsed: UInt64 = 0
        while elapsed < budget {
            for _ in 0..<16 { guard await body() else { return -1 } }
            calls += 16
            elapsed = DispatchTime.now().uptimeNanoseconds - start
        }
        return Double(calls) / (Double(elapsed) / 1e9)
    }

    /// The same on `threads` threads at once; returns the total calls per second.
    static func parallelRate(threads: Int, seconds: Double, _ body: @escaping @Sendable () -> Bool) -> Double {
        let total = Locked(0.0)
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            let rate = Measure.rate(seconds: seconds, body)
            total.withLock { $0 += rate }
        }
        return total.withLock { $0 }
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        let index = min(sorted.count - 1, max(0, Int((p * Double(sorted.count)).rounded(.up)) - 1))
        return sorted[index]
    }
}
