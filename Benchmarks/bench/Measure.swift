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

    /// Per-call cost of `full` beyond `base`, in nanoseconds: the two run in alternating batches of `batch` calls, so
    /// the machine's drift (frequency, neighbours) falls on both alike; the median of the per-round differences.
    static func interleavedOverheadNs(seconds: Double, batch: Int = 256, base: () -> Bool, full: () -> Bool) -> Double {
        interleaved(seconds: seconds, minimumRounds: 5, batch: batch, base: base, full: full)?.overheadNs ?? .nan
    }

    /// Two calls timed in alternation (`base`, then `full`, in batches of `batch`): each one's mean cost over all
    /// rounds, and the per-round difference's median and quartiles, in nanoseconds.
    struct Interleaved {
        var baseNs: Double
        var fullNs: Double
        /// Median of the per-round differences (`full` − `base`, per call), and its quartiles.
        var overheadNs: Double
        var lowerQuartileNs: Double
        var upperQuartileNs: Double
        var rounds: Int
        /// `full`'s rate over `base`'s, from the same rounds.
        var ratio: Double { baseNs / fullNs }
    }

    /// ``interleavedOverheadNs(seconds:batch:base:full:)`` with both arms' costs, for at least `minimumRounds` rounds
    /// whatever `seconds` says: for a signature check of 100 µs or more (ECDSA, Ed25519 here) a quick run's time allows
    /// five rounds, and the median of five differences of a few percent is mostly noise.
    static func interleaved(
        seconds: Double, minimumRounds: Int = 31, batch: Int = 256, base: () -> Bool, full: () -> Bool
    ) -> Interleaved? {
        for _ in 0..<50 { guard base(), full() else { return nil } }
        var differences: [Double] = []
        var (baseTotal, fullTotal): (UInt64, UInt64) = (0, 0)
        let start = DispatchTime.now().uptimeNanoseconds
        let budget = UInt64(seconds * 1e9)
        while DispatchTime.now().uptimeNanoseconds - start < budget || differences.count < minimumRounds {
            let t0 = DispatchTime.now().uptimeNanoseconds
            for _ in 0..<batch where !base() { return nil }
            let t1 = DispatchTime.now().uptimeNanoseconds
            for _ in 0..<batch where !full() { return nil }
            let t2 = DispatchTime.now().uptimeNanoseconds
            baseTotal += t1 - t0
            fullTotal += t2 - t1
            differences.append((Double(t2 - t1) - Double(t1 - t0)) / Double(batch))
        }
        let sorted = differences.sorted()
        let calls = Double(differences.count * batch)
        return Interleaved(
            baseNs: Double(baseTotal) / calls, fullNs: Double(fullTotal) / calls, overheadNs: percentile(sorted, 0.5),
            lowerQuartileNs: percentile(sorted, 0.25), upperQuartileNs: percentile(sorted, 0.75), rounds: differences.count)
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
    /// `makeBody` runs once per thread, so each thread can hold its own inputs (a server's requests arrive in buffers
    /// of their own; one string shared by every thread would measure the contention on its reference count).
    static func parallelRate(threads: Int, seconds: Double, _ makeBody: @escaping @Sendable () -> () -> Bool) -> Double {
        let total = Locked(0.0)
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            let rate = Measure.rate(seconds: seconds, makeBody())
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
