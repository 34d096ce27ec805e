import Foundation

/// Locations of the repository and of the shared test data beside it (`../shared`), found from this file.
package enum TestPaths {
    /// The repository root.
    package static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `../shared` next to the repository: Wycheproof vectors, real provider tokens, JWKS snapshots.
    /// `TOKENGUARD_SHARED` overrides it.
    package static var shared: URL {
        if let override = ProcessInfo.processInfo.environment["TOKENGUARD_SHARED"] { return URL(fileURLWithPath: override) }
        return repositoryRoot.deletingLastPathComponent().appendingPathComponent("shared")
    }

    package static func sharedFile(_ relative: String) throws -> Data {
        try Data(contentsOf: shared.appendingPathComponent(relative))
    }

    package static func sharedFiles(in folder: String) throws -> [URL] {
        try FileManager.default.contentsOfDirectory(at: shared.appendingPathComponent(folder), includingPropertiesForKeys: nil)
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    package static func fixture(_ module: String, _ name: String) throws -> Data {
        try Data(contentsOf: repositoryRoot.appendingPathComponent("Tests/\(module)/Fixtures/\(name)"))
    }
}
