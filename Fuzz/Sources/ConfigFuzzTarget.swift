import TokenGuardCore
import TokenGuardService

/// The configuration loader (YAML through Yams, then tokenguard's own validation), with no environment.
///
/// Properties: nothing traps; an accepted configuration has unique, non-empty provider names, limits that
/// are positive, and loads to the same providers twice.
enum ConfigFuzzTarget {
    static let target = FuzzTarget(name: "config", summary: "configuration loader (YAML and validation)") { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        guard let configuration = try? Configuration.parse(yaml: text, baseDirectory: "/nonexistent", environment: [:]) else { return }
        let names = configuration.providers.map(\.name)
        require(Set(names).count == names.count, "duplicate provider names \(names)")
        require(!names.contains(""), "an empty provider name")
        require(configuration.maxTokenBytes > 0, "max_token_bytes \(configuration.maxTokenBytes)")
        require(configuration.leewaySeconds >= 0, "leeway_seconds \(configuration.leewaySeconds)")
        guard let again = try? Configuration.parse(yaml: text, baseDirectory: "/nonexistent", environment: [:]) else {
            fatalError("a configuration parsed once and failed the second time")
        }
        require(again.providers.map(\.name) == names, "parsing twice gave different providers")
    }
}
