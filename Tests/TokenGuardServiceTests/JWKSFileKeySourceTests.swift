import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
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

    @Test("a file replaced by one of the same size with its modification time kept (cp -p, rsync -t) is re-read")
    func sameSizeAndTime() throws {
        let workspace = try TempWorkspace()
        let path = workspace.url.appendingPathComponent("jwks.json").path
        // Two RSA keys of one size under kids of one length: JWKS documents of the same size.
        let first = TestKey(signingKey: try SharedTestKeys.rsa().signingKey, keyID: "kid-a", algorithm: .rs256)
        let second = try TestKey(.rsa(bits: 2048), keyID: "kid-b", algorithm: .rs256)
        let (before, after) = (try SharedTestKeys.jwks([first]), try SharedTestKeys.jwks([second]))
        #expect(before.utf8.count == after.utf8.count)
        try before.write(toFile: path, atomically: false, encoding: .utf8)
        let kept = Date(timeIntervalSince1970: 1_700_000_000)
        try FileManager.default.setAttributes([.modificationDate: kept], ofItemAtPath: path)
        let source = JWKSFileKeySource(path: path, recheckInterval: .zero)
        #expect(try source.currentKeys().get().contains(keyID: "kid-a"))
        try after.write(toFile: path, atomically: false, encoding: .utf8)
        try FileManager.default.setAttributes([.modificationDate: kept], ofItemAtPath: path)
        let reloaded = try source.currentKeys().get()
        #expect(reloaded.contains(keyID: "kid-b") && !reloaded.contains(keyID: "kid-a"))
    }
}
