import ArgumentParser
import Foundation
import Hummingbird
import Logging
import TokenGuardCore
import TokenGuardServer
import TokenGuardService

struct DevIdPCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dev-idp",
        abstract: "Run a local developer IdP (loopback only): a JWKS for tokens minted by `tokenguard mint`.",
        discussion: """
            Trusting it takes an explicit provider entry with dev_idp: true, e.g.
              apple: { audiences: ["com.example.app"], jwks_url: "http://127.0.0.1:9090/jwks", dev_idp: true }
            Endpoints: /jwks, /.well-known/openid-configuration, /mint?provider=apple&nonce=RAW
            """
    )

    @Option(name: .long, help: "Listen address; loopback only.")
    var listen = "127.0.0.1:9090"

    @Option(name: .long, help: "Folder holding the dev IdP's signing key (created on first use).")
    var stateDir = ".tokenguard-dev-idp"

    func run() async throws {
        Logs.bootstrap(format: nil, defaultLevel: .info)
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]) else {
            throw ValidationError("--listen must be HOST:PORT")
        }
        let host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        do {
            try DevIdPServer.checkLoopback(host)
        } catch {
            Stderr.write("tokenguard: \(error)\n")
            throw ExitCodes.usage
        }
        let minter = try DevTokenMinter.load(directory: stateDir)
        let logger = Logger(label: "tokenguard.dev-idp")
        let app = try DevIdPServer.build(
            minter: minter, host: host, port: port, logger: logger,
            onServerRunning: { bound in
                logger.warning("DEVELOPMENT IdP: tokens signed with key \(minter.keyID) from \(stateDir); never trust it in production")
                Stdout.write("dev IdP: JWKS at http://\(host):\(bound)/jwks (kid \(minter.keyID))\n")
            })
        try await app.runService()
    }
}

struct MintCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mint",
        abstract: "Sign a token shaped like Apple's, Facebook Limited Login's or Microsoft's with the dev IdP's key."
    )

    @Option(name: .long, help: "apple, facebook_limited or microsoft.")
    var provider: String

    @Option(name: .long, help: "The raw nonce (hashed into the token as the provider's SDK does).")
    var nonce: String?

    @Option(name: .long, help: "Audience (default: com.example.app, 1234567890, or a fixed GUID for microsoft).")
    var audience: String?

    @Option(name: .long, help: "Subject (Microsoft: the oid).")
    var subject: String?

    @Option(name: .long, help: "Email claim.")
    var email: String?

    @Option(name: .long, help: "Lifetime in seconds, 1 to 31536000 (default: the provider's real one).")
    var lifetime: Int64?

    func validate() throws {
        if let lifetime, !(1...31_536_000).contains(lifetime) { throw ValidationError("--lifetime must be between 1 and 31536000 seconds") }
    }

    @Option(name: .long, help: "Folder holding the dev IdP's signing key (shared with `dev-idp`).")
    var stateDir = ".tokenguard-dev-idp"

    func run() throws {
        guard let kind = ProviderKind(rawValue: provider), [.apple, .facebookLimited, .microsoft].contains(kind) else {
            throw ValidationError("--provider must be apple, facebook_limited or microsoft")
        }
        let minter = try DevTokenMinter.load(directory: stateDir)
        try Stdout.answer(try minter.mint(kind: kind, audience: audience, subject: subject, rawNonce: nonce, email: email, lifetime: lifetime))
    }
}
