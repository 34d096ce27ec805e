import Foundation
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

/// The contract's `jwks_file`: pinned keys, re-read when the file changes.
struct JWKSFileKeySourceTests {
    @Test("a pinned JWKS file is re-read when it changes; a broken rewrite keeps the last good keys")
    func jwksFileReload() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokenguard-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("jwks.json").path
        let source = JWKSFileKeySource(path: path, recheckInterval: .zero)
        #expect(source.currentKeys().isFailureWith(.keysUnavailable), "no file yet: keys_unavailable, never a rejection")
        let first = try SharedTestKeys.rsa()
        let second = try SharedTestKeys.p256()
        try SharedTestKeys.jwks([first]).write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try source.currentKeys().get().contains(keyID: first.keyID))
        try SharedTestKeys.jwks([second]).write(toFile: path, atomically: true, encoding: .utf8)
        let reloaded = try source.currentKeys().get()
        #expect(reloaded.contains(keyID: second.keyID) && !reloaded.contains(keyID: first.keyID))
        try "{\"keys\": [".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try source.currentKeys().get().contains(keyID: second.keyID), "a broken file keeps the last good keys")
        #expect(source.lastError != nil)
    }
}
