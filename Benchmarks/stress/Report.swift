import Foundation
import TokenGuardCore
import TokenGuardService

/// What a stress run found: figures for the JSON report and the reasons it failed, if any.
struct StressReport {
    var figures: [(String, JSONValue)] = []
    var failures: [String] = []
    var passed: Bool { failures.isEmpty }

    mutating func add(_ name: String, _ value: JSONValue) { figures.append((name, value)) }
    mutating func fail(_ reason: String) { failures.append(reason) }

    var json: String {
        JSONWriter.string(.object(JSONObject(figures + [("passed", .bool(passed)), ("failures", .array(failures.map { .string($0) }))])))
    }
}

/// Latencies in milliseconds, summarised as percentiles.
struct LatencySample {
    private(set) var values: [Double] = []
    mutating func add(_ milliseconds: Double) { values.append(milliseconds) }
    mutating func merge(_ other: LatencySample) { values += other.values }
    var count: Int { values.count }

    func percentile(_ p: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
        return sorted[max(0, min(sorted.count - 1, rank - 1))]
    }

    var summary: String {
        String(format: "n=%d p50=%.2f ms p99=%.2f ms max=%.2f ms", count, percentile(50), percentile(99), values.max() ?? 0)
    }

    var json: JSONValue {
        .object(
            JSONObject([
                ("count", .integer(Int64(count))), ("p50_ms", .number(round(percentile(50) * 1000) / 1000)),
                ("p99_ms", .number(round(percentile(99) * 1000) / 1000)), ("max_ms", .number(round((values.max() ?? 0) * 1000) / 1000)),
            ]))
    }
}

/// Resident memory of a process, from /proc (Linux), in MiB.
func residentMiB(pid: Int32) -> Double? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kilobytes = line.split(separator: " ").compactMap { Double($0) }.first
        return kilobytes.map { $0 / 1024 }
    }
    return nil
}

/// Seconds on a monotonic clock.
func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// A line on standard output, written at once (the scripts show progress while a run goes on).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
