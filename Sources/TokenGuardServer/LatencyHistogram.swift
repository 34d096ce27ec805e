import Synchronization

/// A Prometheus histogram of durations recorded with two atomic additions: no lock, no allocation. Buckets are
/// counted apart and summed when written out, so a scrape never sees `le` counts that go down.
final class LatencyHistogram: Sendable {
    /// Upper bounds, from 50 µs (a cached verdict over HTTP) to 10 s (a verification that waited on a slow IdP).
    static let bounds: [(nanoseconds: UInt64, text: String)] = [
        (50_000, "0.00005"), (100_000, "0.0001"), (250_000, "0.00025"), (500_000, "0.0005"), (1_000_000, "0.001"),
        (2_500_000, "0.0025"), (5_000_000, "0.005"), (10_000_000, "0.01"), (25_000_000, "0.025"), (50_000_000, "0.05"),
        (100_000_000, "0.1"), (250_000_000, "0.25"), (500_000_000, "0.5"), (1_000_000_000, "1"), (2_500_000_000, "2.5"),
        (5_000_000_000, "5"), (10_000_000_000, "10"),
    ]

    final class Cell: Sendable {
        let value = Atomic<UInt64>(0)
    }

    /// One cell per bound, then one for longer durations.
    private let buckets = (0...LatencyHistogram.bounds.count).map { _ in Cell() }
    private let sumNanoseconds = Atomic<UInt64>(0)

    func record(nanoseconds: UInt64) {
        var index = 0
        while index < Self.bounds.count, nanoseconds > Self.bounds[index].nanoseconds { index += 1 }
        buckets[index].value.wrappingAdd(1, ordering: .relaxed)
        sumNanoseconds.wrappingAdd(nanoseconds, ordering: .relaxed)
    }

    /// The counts by bucket (not cumulative) and the sum, as read now.
    func snapshot() -> (counts: [UInt64], sumNanoseconds: UInt64) {
        (buckets.map { $0.value.load(ordering: .relaxed) }, sumNanoseconds.load(ordering: .relaxed))
    }

    /// `_bucket`, `_sum` and `_count` lines. Label values are escaped as the text format asks.
    func append(to text: inout [UInt8], name: String, labels: [(String, String)]) {
        let (counts, sum) = snapshot()
        let labelText = labels.map { "\($0.0)=\"\(Self.escaped($0.1))\"" }.joined(separator: ",")
        var cumulative: UInt64 = 0
        for (index, count) in counts.enumerated() {
            cumulative &+= count
            let bound = index < Self.bounds.count ? Self.bounds[index].text : "+Inf"
            text.append(contentsOf: "\(name)_bucket{\(labelText),le=\"\(bound)\"} \(cumulative)\n".utf8)
        }
        let seconds = "\(sum / 1_000_000_000).\(String(String(sum % 1_000_000_000 + 1_000_000_000).dropFirst()))"
        text.append(contentsOf: "\(name)_sum{\(labelText)} \(seconds)\n".utf8)
        text.append(contentsOf: "\(name)_count{\(labelText)} \(cumulative)\n".utf8)
    }

    static func escaped(_ value: String) -> String {
        var out = ""
        for character in value.unicodeScalars {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }
}
