import TokenGuardCore

/// A configuration problem, naming the key and what is wrong with it. The CLI exits 2 on one.
package struct ConfigError: Error, Sendable, CustomStringConvertible {
    /// Dotted path of the offending key, e.g. `providers.apple.audiences`.
    package let key: String
    package let problem: String

    package init(_ key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    package var description: String { key.isEmpty ? problem : "\(key): \(problem)" }
}
