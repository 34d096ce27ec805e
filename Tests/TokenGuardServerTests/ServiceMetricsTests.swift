import Dispatch
import Testing
import TokenGuardCore

@testable import TokenGuardServer

/// The verification metrics' own histogram and label set (the e2e tests read them through `/metrics`).
struct ServiceMetricsTests {
    func text(_ metrics: ServiceMetrics) -> String { String(decoding: metrics.durationExposition(), as: UTF8.self) }

    @Test("durations land in the first bucket they fit (bounds inclusive), cumulated when written, with an exact sum")
    func histogram() {
        let histogram = LatencyHistogram()
        for nanoseconds: UInt64 in [10_000, 50_000, 50_001, 20_000_000_000] { histogram.record(nanoseconds: nanoseconds) }
        var bytes: [UInt8] = []
        histogram.append(to: &bytes, name: "d", labels: [("provider", "a\"b\\c\nd")])
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        let labels = #"provider="a\"b\\c\nd""#
        #expect(lines.count == LatencyHistogram.bounds.count + 3)
        #expect(lines.contains("d_bucket{\(labels),le=\"0.00005\"} 2"))
        #expect(lines.contains("d_bucket{\(labels),le=\"0.0001\"} 3"))
        #expect(lines.contains("d_bucket{\(labels),le=\"10\"} 3"))
        #expect(lines.contains("d_bucket{\(labels),le=\"+Inf\"} 4"))
        #expect(lines.contains("d_sum{\(labels)} 20.000110001"))
        #expect(lines.contains("d_count{\(labels)} 4"))
    }

    @Test("records from many tasks at once are all counted")
    func concurrentRecords() async {
        let histogram = LatencyHistogram()
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<4 {
                group.addTask { for index in 0..<20_000 { histogram.record(nanoseconds: UInt64(task * 1_000_000 + index)) } }
            }
        }
        let (counts, sum) = histogram.snapshot()
        #expect(counts.reduce(0, +) == 80_000)
        let offsets: UInt64 = (0 + 1 + 2 + 3) * 1_000_000 * 20_000
        let expected: UInt64 = offsets + 4 * (19_999 * 20_000 / 2)
        #expect(sum == expected)
    }

    @Test("the label set is the configured providers and unknown; names are matched byte for byte")
    func labelSet() {
        let metrics = ServiceMetrics(providers: [("apple", .enforce), ("microsoft", .shadow)])
        #expect(metrics.slot("apple").provider == "apple")
        #expect(metrics.slot("microsoft").forwardAuthMode == .shadow)
        for other in ["APPLE", "apple ", "appl\u{65}\u{301}", "", "unknown"] { #expect(metrics.slot(other).provider == "unknown") }
        metrics.record(provider: "somebody", result: .failure(VerificationError(.unknownProvider, "")), startedAt: DispatchTime.now())
        let written = text(metrics)
        #expect(written.hasPrefix("# TYPE tokenguard_verification_duration_seconds histogram\n"))
        #expect(written.contains(#"tokenguard_verification_duration_seconds_count{provider="unknown"} 1"#))
        #expect(written.contains(#"tokenguard_verification_duration_seconds_count{provider="apple"} 0"#))
        // A provider configured as "unknown" shares its series with unknown names: one histogram per label set.
        let shared = ServiceMetrics(providers: [("unknown", .shadow)])
        #expect(shared.slot("nobody").provider == "unknown" && shared.slot("nobody").forwardAuthMode == .shadow)
        #expect(text(shared).split(separator: "\n").filter { $0.contains("_count{") }.count == 1)
    }

    @Test("outcome indexes: valid first, then every error code in order")
    func outcomes() {
        #expect(ServiceMetrics.outcomeIndex(.failure(VerificationError(.unknownKey, ""))) > 0)
        for code in ErrorCode.allCases {
            #expect(ServiceMetrics.outcomeNames[ServiceMetrics.outcomeIndex(.failure(VerificationError(code, "")))] == code.rawValue)
        }
    }
}
