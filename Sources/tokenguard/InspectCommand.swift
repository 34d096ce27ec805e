import ArgumentParser
import Foundation
import TokenGuardCore
import TokenGuardService

struct InspectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Decode a token's header and claims WITHOUT verifying anything.",
        discussion: "For debugging only: nothing printed here has been checked. Use `verify` to verify."
    )

    @Argument(help: "The token, or '-' to read it from standard input.")
    var token: String

    func run() throws {
        var text = token
        if token == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let banner = String(repeating: "!", count: 72)
        try Stdout.answer(
            "\(banner)\n!!! UNVERIFIED: decoded only. The signature, issuer, audience, expiry and nonce were NOT checked. !!!\n\(banner)")
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, text.utf8.count <= 1 << 20 else {
            try Stdout.answer("not a compact JWS (expected three dot-separated segments)")
            throw ExitCodes.rejected
        }
        func decode(_ part: Substring) -> JSONValue {
            guard let bytes = Base64URL.decode(String(part)) else { return .string("(not canonical base64url)") }
            if let value = try? JSONParser.parse(bytes) { return value }
            return .string("(not JSON: \(bytes.count) bytes)")
        }
        let output = JSONObject([
            ("header", decode(parts[0])), ("claims", decode(parts[1])),
            ("signature_bytes", .integer(Int64(Base64URL.decode(String(parts[2]))?.count ?? -1))),
        ])
        try Stdout.answer(JSONWriter.string(.object(output)) + "\n" + banner)
    }
}
