import Foundation

/// Locations of the repository and of the shared test data beside it (`../shared`), found from this file.
public enum TestPaths {
    /// The repository root.
    public static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `../shared` next to the repository: Wycheproof vectors, real provider tokens, JWKS snapshots.
    /// `TOKENGUARD_SHARED` overrides it.
    public static var shared: URL {
        if let override = ProcessInfo.processInfo.environment["TOKENGUARD_SHARED"] { return URL(fileURLWithPath: override) }
        return repositoryRoot.deletingLastPathComponent().appendingPathComponent("shared")
    }

    public static func sharedFile(_ relative: String) throws -> Data {
        try Data(contentsOf: shared.appendingPathComponent(relative))
    }

    public static func sharedFiles(in folder: String) throws -> [URL] {
        try FileManager.default.contentsOfDirectory(at: shared.appendingPathComponent(folder), includingPropertiesForKeys: nil)
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    public static func fixture(_ module: String, _ name: String) throws -> Data {
        try Data(contentsOf: repositoryRoot.appendingPathComponent("Tests/\(module)/Fixtures/\(name)"))
    }
}
