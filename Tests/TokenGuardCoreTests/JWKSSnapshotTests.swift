import Foundation
import Testing
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

/// Every verbatim JWKS in ../shared/jwks-snapshots loads: each key usable, or skipped with a stated reason; the
/// discovery documents name what tokenguard trusts for the built-in providers.
struct JWKSSnapshotTests {
    static let files = ["apple", "entra-common", "entra-organizations", "facebook"].map { "jwks-snapshots/\($0)-panva-wellknown.json" }

    @Test("each snapshot's JWKS loads with every key usable or skipped with a reason", arguments: files)
    func loads(_ file: String) throws {
        let document = try JSONParser.parseObject(Array(try TestPaths.sharedFile(file)))
        let jwks = try #require(document["jwks"]?.objectValue)
        let entries = try #require(jwks["keys"]?.arrayValue)
        let set = try KeySet.parse(jwks: JSONWriter.bytes(.object(jwks)))
        #expect(!entries.isEmpty)
        #expect(set.keys.count + set.skipped.count == entries.count, "\(file): every entry is a key or a stated skip")
        for skipped in set.skipped { #expect(!skipped.reason.isEmpty) }
        // The providers' keys are RSA signing keys tokenguard uses: none of them may be skipped.
        #expect(set.skipped.isEmpty, "\(file): \(set.skipped.map { "\($0.keyID ?? "-"): \($0.reason)" })")
        for key in set.keys { #expect(key.permits(.rs256), "\(file): \(key.keyID ?? "-")") }
    }

    @Test("discovery documents: the built-in issuers and JWKS URLs are the published ones (tokenguard never takes them from discovery)")
    func discovery() throws {
        func metadata(_ name: String) throws -> JSONObject {
            try #require(
                try JSONParser.parseObject(Array(try TestPaths.sharedFile("jwks-snapshots/\(name)-panva-wellknown.json")))["metadata"]?.objectValue)
        }
        #expect(try metadata("apple")["issuer"]?.stringValue == ProviderPolicy.appleIssuer)
        #expect(try metadata("apple")["jwks_uri"]?.stringValue == "https://appleid.apple.com/auth/keys")
        #expect(try metadata("entra-common")["issuer"]?.stringValue == ProviderPolicy.microsoftIssuerTemplate)
        #expect(try metadata("entra-common")["jwks_uri"]?.stringValue == "https://login.microsoftonline.com/common/discovery/v2.0/keys")
        #expect(ProviderPolicy.facebookIssuers.contains(try metadata("facebook")["issuer"]?.stringValue ?? ""))
    }
}
