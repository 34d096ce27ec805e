// swift-tools-version:6.2
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// The modules that call C: every unsafe construct must be marked `unsafe` and reviewed (SE-0458), and an
/// unmarked one fails the build.
let memorySafeSettings: [SwiftSetting] =
    strictSettings + [
        .strictMemorySafety(),
        .treatWarning("StrictMemorySafety", as: .error),
    ]

/// `TOKENGUARD_BENCH_PEERS=off` leaves the bench's jwt-kit peers (and jwt-kit's BoringSSL, about four minutes of a
/// clean release build) out of the build: CI's smoke run of the bench sets it; `swift run -c release bench` does not.
/// Only the bench target's dependencies and flags change, so every other module's build stays as it was.
let benchPeers = Context.environment["TOKENGUARD_BENCH_PEERS"] != "off"

let package = Package(
    name: "tokenguard",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "tokenguard", targets: ["tokenguard"]),
        .library(name: "TokenGuardCore", targets: ["TokenGuardCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // Benchmark peer only: the bench compares tokenguard with jwt-kit on the same tokens.
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
    ],
    targets: [
        // C system libraries: a modulemap and a tiny shim header each, nothing else.
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CJWT", path: "Sources/CJWT", pkgConfig: "libjwt", providers: [.apt(["libjwt-dev"])]),
        .systemLibrary(name: "CHiredis", path: "Sources/CHiredis", pkgConfig: "hiredis", providers: [.apt(["libhiredis-dev"])]),

        // A lock ThreadSanitizer can see (see Locked.swift); the only shared-state primitive the modules use.
        .target(name: "TokenGuardSync", swiftSettings: memorySafeSettings),
        // The only Swift module that imports COpenSSL.
        .target(
            name: "TokenGuardCrypto",
            dependencies: ["COpenSSL", "TokenGuardSync"],
            swiftSettings: memorySafeSettings
        ),
        // The pure verification core: JSON, JOSE, keys and key sets, provider policies, claims, verdicts, checks,
        // request wire forms. No Foundation, logging, metrics, SQLite or YAML (scripts/check-layout.sh).
        .target(
            name: "TokenGuardCore",
            dependencies: ["TokenGuardCrypto", "TokenGuardSync"],
            swiftSettings: strictSettings
        ),
        // The service around the core: config (YAML), fetched and archived keys, discovery, opaque-token
        // inspection, replay protection, the provider registry, the dev-IdP minter. No C module, no HTTP serving.
        .target(
            name: "TokenGuardService",
            dependencies: [
                "TokenGuardCore", "TokenGuardCrypto", "TokenGuardSync",
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: strictSettings
        ),
        // The NDJSON batch reader and runner (`tokenguard batch`).
        .target(
            name: "TokenGuardBatch",
            dependencies: ["TokenGuardService", "TokenGuardCore"],
            swiftSettings: strictSettings
        ),
        // Outbound HTTPS on libcurl: the only Swift module that imports CCurl.
        .target(
            name: "TokenGuardFetch",
            dependencies: ["CCurl", "TokenGuardService", "TokenGuardCore"],
            swiftSettings: memorySafeSettings
        ),
        // The fleet replay store on Redis: the only Swift module that imports CHiredis.
        .target(
            name: "TokenGuardRedis",
            dependencies: ["CHiredis", "TokenGuardService", "TokenGuardCore", "TokenGuardSync", .product(name: "Logging", package: "swift-log")],
            swiftSettings: memorySafeSettings
        ),
        // The HTTP API on Hummingbird 2: the only module that serves HTTP.
        .target(
            name: "TokenGuardServer",
            dependencies: [
                "TokenGuardService", "TokenGuardCore", "TokenGuardSync",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "tokenguard",
            dependencies: [
                "TokenGuardService", "TokenGuardBatch", "TokenGuardCore", "TokenGuardFetch", "TokenGuardServer", "TokenGuardCrypto",
                "TokenGuardRedis",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "bench",
            dependencies: [
                "TokenGuardService", "TokenGuardBatch",
                "TokenGuardCore", "TokenGuardCrypto", "TokenGuardServer", "TokenGuardFetch", "TokenGuardRedis", "TokenGuardSync", "COpenSSL", "CJWT",
                "TokenGuardTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"), .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ] + (benchPeers ? [.product(name: "JWTKit", package: "jwt-kit")] : []),
            path: "Benchmarks/bench",
            exclude: benchPeers ? [] : ["JWTKitPeer.swift", "JWTKitServer.swift"],
            swiftSettings: strictSettings + (benchPeers ? [.define("TOKENGUARD_BENCH_PEERS")] : [])
        ),

        // A verification loop for valgrind (scripts/leak-check.sh): a small target on top of the release build.
        .executableTarget(
            name: "leakloop",
            dependencies: ["TokenGuardService", "TokenGuardCore", "TokenGuardCrypto", "TokenGuardTestSupport"],
            path: "Benchmarks/leakloop",
            swiftSettings: strictSettings
        ),

        // The soak and abuse runs against the real server (scripts/soak.sh, scripts/abuse.sh).
        .executableTarget(
            name: "stress",
            dependencies: ["TokenGuardService", "TokenGuardCore", "TokenGuardCrypto", "TokenGuardFetch", "TokenGuardSync", "TokenGuardTestSupport"],
            path: "Benchmarks/stress",
            swiftSettings: strictSettings
        ),

        // libFuzzer targets (scripts/fuzz.sh): one executable, the first argument names the target.
        .executableTarget(
            name: "tokenguard-fuzz",
            dependencies: ["TokenGuardService", "TokenGuardBatch", "TokenGuardCore", "TokenGuardCrypto"],
            path: "Fuzz/Sources",
            swiftSettings: strictSettings
        ),

        // Test support: key generation, token minting, libjwt reference verifier.
        .target(
            name: "TokenGuardTestSupport",
            dependencies: ["TokenGuardService", "TokenGuardCore", "TokenGuardCrypto", "TokenGuardFetch", "TokenGuardSync", "CJWT"],
            path: "Tests/TokenGuardTestSupport",
            swiftSettings: strictSettings
        ),
        // Tests mirror the modules. Core's need no server, no Redis and no network: `swift test --filter TokenGuardCoreTests`.
        .testTarget(
            name: "TokenGuardCryptoTests",
            dependencies: ["TokenGuardCrypto", "TokenGuardCore", "TokenGuardTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenGuardCoreTests",
            dependencies: ["TokenGuardCore", "TokenGuardCrypto", "TokenGuardSync", "TokenGuardTestSupport"],
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        // The service layer with local IdP servers on 127.0.0.1 and the real curl client.
        .testTarget(
            name: "TokenGuardServiceTests",
            dependencies: [
                "TokenGuardService", "TokenGuardCore", "TokenGuardCrypto", "TokenGuardFetch", "TokenGuardSync", "TokenGuardTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"), .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenGuardBatchTests",
            dependencies: ["TokenGuardBatch", "TokenGuardCore", "TokenGuardTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenGuardFetchTests",
            dependencies: ["TokenGuardFetch", "TokenGuardService", "TokenGuardCore", "TokenGuardTestSupport"],
            swiftSettings: strictSettings
        ),
        // The real binary end to end: the server over HTTP, with redis-server, and the CLI.
        .testTarget(
            name: "TokenGuardServerTests",
            dependencies: [
                "TokenGuardService", "TokenGuardBatch", "TokenGuardCore", "TokenGuardCrypto", "TokenGuardFetch", "TokenGuardRedis",
                "TokenGuardServer", "TokenGuardSync",
                "TokenGuardTestSupport", "tokenguard", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenGuardCLITests",
            dependencies: ["TokenGuardService", "TokenGuardBatch", "TokenGuardCore", "TokenGuardCrypto", "TokenGuardTestSupport", "tokenguard"],
            swiftSettings: strictSettings
        ),
    ]
)
