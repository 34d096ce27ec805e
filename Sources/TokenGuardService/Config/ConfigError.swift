import TokenGuardCore

/// A configuration problem, naming the key and what is wrong with it. The CLI exits 2 on one.
public struct ConfigError: Error, Sendable, CustomStringConvertible {
    /// Dotted path of the offending key, e.g. `providers.apple.audiences`.
    public let key: String
    public let problem: String

    public init(_ key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    public var description: String { key.isEmpty ? problem : "\(key): \(problem)" }
}
