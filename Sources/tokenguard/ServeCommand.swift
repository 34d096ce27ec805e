import ArgumentParser
import Foundation
import Hummingbird
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardFetch
import TokenGuardServer
import TokenGuardService

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP API (default 127.0.0.1:8080).",
        discussion: """
            With no --config and no TOKENGUARD_CONFIG, serves Apple, Facebook Limited Login and Microsoft on built-in \
            defaults (audiences from TOKENGUARD_APPLE_AUDIENCES, TOKENGUARD_FACEBOOK_LIMITED_AUDIENCES, \
            TOKENGUARD_MICROSOFT_AUDIENCES). --demo runs an embedded developer IdP on loopback, trusts it, and prints \
            a ready-to-paste curl command. SIGTERM or SIGINT stops accepting, finishes in-flight requests, exits 0;
            with server.shutdown_grace_seconds, /readyz first answers 503 that long while requests are still served.
            """
    )

    @Option(name: .long, help: "Config file (YAML or JSON). Default: $TOKENGUARD_CONFIG, else built-in defaults.")
    var config: String?

    @Option(name: .long, help: "Listen address HOST:PORT (overrides the config and TOKENGUARD_LISTEN).")
    var listen: String?

    @Flag(name: .long, help: "Run with an embedded developer IdP (loopback only) and print a curl command to try.")
    var demo = false

    @Option(name: .long, help: "Log format: text or json (default: $TOKENGUARD_LOG_FORMAT, else text).")
    var logFormat: String?

    func run() async throws {
        Logs.bootstrap(format: logFormat ?? ProcessInfo.processInfo.environment["TOKENGUARD_LOG_FORMAT"], defaultLevel: .info)
        let logger = Logger(label: "tokenguard")
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: prometheus))

        var configuration: Configuration
        do {
            if demo {
                configuration = Configuration()
            } else if config != nil || ProcessInfo.processInfo.environment["TOKENGUARD_CONFIG"] != nil {
                configuration = try Configuration.load(path: config)
            } else {
                configuration = try Configuration.builtInDefaults()
                logger.notice("no config file: serving apple, facebook_limited and microsoft on built-in defaults")
            }
            if let listen { configuration.listen = try Configuration.validatedListen(listen, key: "--listen") }
            try configuration.server.loadCallerKeys(environment: ProcessInfo.processInfo.environment)
        } catch {
            Stderr.write("tokenguard: config error: \(error)\n")
            throw ExitCodes.usage
        }

        var extraServices: [any Service] = []
        var demoMinter: DevTokenMinter? = nil
        var demoIdPPort = 0
        var demoIdPListening: StartGate? = nil
        if demo {
            let minter = try DevTokenMinter(key: try .init(generating: .rsa(bits: 2048)))
            let port = try LoopbackPort.pick()
            let listening = StartGate()
            extraServices.append(
                try DevIdPServer.build(
                    minter: minter, host: "127.0.0.1", port: port, logger: Logger(label: "tokenguard.dev-idp"),
                    onServerRunning: { _ in listening.open() }))
            demoIdPListening = listening
            configuration.providers = DemoConfiguration.providers(jwksURL: "http://127.0.0.1:\(port)/jwks")
            configuration.keyArchive = ""  // no archive for the demo
            demoMinter = minter
            demoIdPPort = port
        }
        for provider in configuration.providers where provider.devIdP {
            logger.warning(
                "!!! provider \(provider.name) TRUSTS A DEVELOPMENT IdP over plain http: tokens it mints are accepted. Never do this in production. !!!"
            )
        }

        if configuration.replay != nil {
            for (first, second) in configuration.providersAcceptingTheSameTokens {
                logger.warning(
                    "providers \(first) and \(second) accept the same tokens (an issuer and an audience in common): replay protection is per provider, so one sign-in could be accepted once by each"
                )
            }
        }
        let registry = try ConfigLoading.makeRegistry(configuration, logger: logger)
        let (host, port) = configuration.listenHostAndPort
        let kinds = Dictionary(uniqueKeysWithValues: configuration.providers.map { ($0.name, $0.kind) })
        let minter = demoMinter
        let idpPort = demoIdPPort
        let drain = ShutdownDrain(graceSeconds: configuration.server.shutdownGraceSeconds, logger: logger)
        let app = buildApplication(
            registry: registry, kinds: kinds, host: host, port: port, settings: configuration.server, prometheus: prometheus, logger: logger,
            extraServices: extraServices, drain: drain, keyRefreshStartsAfter: demoIdPListening,
            onServerRunning: { boundPort in
                logger.notice("tokenguard \(TokenGuardVersion.string) listening on \(host):\(boundPort)")
                if let minter { DemoConfiguration.printTryIt(minter: minter, host: host, port: boundPort, idpPort: idpPort) }
            })
        // The drain watches the stop signals (the group none): it returns after the grace period, and its return
        // starts the group's graceful shutdown.
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: app), .init(service: drain, successTerminationBehavior: .gracefullyShutdownGroup)],
                gracefulShutdownSignals: [], logger: logger))
        try await group.run()
        await registry.replayStore?.finish()
    }
}

/// `serve --demo`: the three JWS providers trusting the embedded dev IdP, and the curl commands to try.
enum DemoConfiguration {
    static func providers(jwksURL: String) -> [ProviderConfiguration] {
        [
            ProviderConfiguration(
                name: "apple", kind: .apple, settings: .jws(.apple(audiences: [DevTokenMinter.defaultAudiences[.apple] ?? ""]), .jwksURL(jwksURL)),
                devIdP: true),
            ProviderConfiguration(
                name: "facebook_limited", kind: .facebookLimited,
                settings: .jws(.facebookLimited(audiences: [DevTokenMinter.defaultAudiences[.facebookLimited] ?? ""]), .jwksURL(jwksURL)),
                devIdP: true),
            ProviderConfiguration(
                name: "microsoft", kind: .microsoft,
                settings: .jws(.microsoft(audiences: [DevTokenMinter.defaultAudiences[.microsoft] ?? ""], tenants: .any), .jwksURL(jwksURL)),
                devIdP: true),
        ]
    }

    static func printTryIt(minter: DevTokenMinter, host: String, port: Int, idpPort: Int) {
        let nonce = UUID().uuidString
        guard let token = try? minter.mint(kind: .apple, rawNonce: nonce) else { return }
        var parts = token.split(separator: ".").map(String.init)
        // Tamper: claim another user in the payload, keep the signature.
        if var claims = (Base64URL.decode(parts[1])).flatMap({ try? JSONParser.parseObject($0) }) {
            claims.set("sub", .string("000000.attacker"))
            parts[1] = Base64URL.encode(JSONWriter.bytes(.object(claims)))
        }
        let tampered = parts.joined(separator: ".")
        let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(port)/v1/verify"
        Stdout.write(
            """

            tokenguard demo: an embedded developer IdP is trusted for apple, facebook_limited and microsoft.
            Verify a freshly minted Sign in with Apple token (expect 200 and "valid": true):

              curl -s \(url) -H 'Content-Type: application/json' -d '{"provider":"apple","token":"\(token)","nonce":"\(nonce)"}'

            The same token with its payload altered (expect 401 and "invalid_signature"):

              curl -s \(url) -H 'Content-Type: application/json' -d '{"provider":"apple","token":"\(tampered)","nonce":"\(nonce)"}'

            Mint more (apple, facebook_limited, microsoft) with: curl -s 'http://127.0.0.1:\(idpPort)/mint?provider=microsoft&nonce=abc'
            Keys, providers and metrics: curl -s \(url.replacingOccurrences(of: "/v1/verify", with: "/v1/providers")) ; .../readyz ; .../metrics
            Stop with Ctrl-C.


            """)
    }
}
