import Foundation
import TokenGuardCore
import TokenGuardCrypto
import Yams

/// tokenguard's configuration (contract: Config). YAML or JSON; unknown keys are errors, not ignored, so
/// a typo in a security setting cannot silently fall back to a default.
package struct Configuration: Sendable {
    package var listen = "127.0.0.1:8080"
    package var leewaySeconds = ProviderPolicy.defaultLeewaySeconds
    package var maxTokenBytes = ProviderPolicy.defaultMaxTokenBytes
    package var keyArchive = "tokenguard-keys.sqlite"
    package var providers: [ProviderConfiguration] = []
    /// Caching and failure handling for fetched keys (`keys:`; an extension of the contract).
    package var keyFetch = KeyFetchPolicy()
    /// Outbound HTTP timeouts in milliseconds (`http:`; an extension of the contract).
    package var connectTimeoutMilliseconds = 2_000
    package var totalTimeoutMilliseconds = 5_000
    /// `http.ca_file`: CA certificates trusted in addition to the system's (private IdPs).
    package var extraCAFile: String? = nil
    /// HTTP API limits (`server:`; an extension of the contract).
    package var server = ServerLimits()
    /// Replay protection (`replay:`), off when nil.
    package var replay: ReplaySettings?
    /// Verified-token cache entries per JWS provider (`token_cache_size`; 0 disables).
    package var tokenCacheSize = VerifiedTokenCache.defaultCapacity
    /// Where revocations live (`revocations:`).
    package var revocations = RevocationSettings()
    /// The Redis server shared by the replay and revocation stores (`redis:`).
    package var redis: RedisSettings? = nil

    package init() {}

    package func provider(named name: String) -> ProviderConfiguration? { providers.first { $0.name.sameBytes(as: name) } }
}

/// Replay protection settings (contract: `replay`).
package struct ReplaySettings: Sendable, Equatable {
    package enum Store: Sendable, Equatable {
        /// One process, bounded.
        case memory(maximumEntries: Int)
        /// A Redis server shared by the fleet.
        case redis(url: String)
    }

    package var store: Store
}

/// The `redis:` block: one server (or a Sentinel-watched master) for the replay and revocation stores.
package struct RedisSettings: Sendable, Equatable {
    package enum Password: Sendable, Equatable {
        case environment(String)
        /// Re-read at every new connection, so a rotated Secret is picked up.
        case file(String)
    }

    /// `redis://[user@]host:port[/db]`, never with a password.
    package var url: String
    package var password: Password? = nil
    /// `host:port` of each Sentinel; with them, `masterName` names the master to ask for.
    package var sentinels: [(host: String, port: Int)] = []
    package var masterName: String? = nil
    /// What the Sentinels ask of clients (`requirepass` / an ACL user in sentinel.conf): they name the master, and the
    /// master is given `password`, so they are trusted; authenticating to them keeps a stranger from answering.
    package var sentinelPassword: Password? = nil

    package static func == (lhs: RedisSettings, rhs: RedisSettings) -> Bool {
        lhs.url == rhs.url && lhs.password == rhs.password && lhs.masterName == rhs.masterName && lhs.sentinelPassword == rhs.sentinelPassword
            && lhs.sentinels.map { "\($0.host):\($0.port)" } == rhs.sentinels.map { "\($0.host):\($0.port)" }
    }
}

/// Revocation settings (contract: `revocations`).
package struct RevocationSettings: Sendable, Equatable {
    package enum Store: Sendable, Equatable {
        /// SQLite beside the key archive (or at `path`); in memory when there is no key archive (the demo).
        case sqlite(path: String?)
        /// The Redis server of the `redis:` block (or `replay.redis_url`).
        case redis
    }

    package var store: Store = .sqlite(path: nil)
    /// Verification fails closed when revocations have not been read for this long.
    package var maximumStalenessSeconds = 5

    package init() {}
}

/// The HTTP API's limits (config `server:`), with the defaults the service ships with.
package struct ServerLimits: Sendable, Equatable {
    package var maximumVerifyBodyBytes = 64 * 1024
    package var maximumBatchBodyBytes = 4 * 1024 * 1024
    package var maximumBatchItems = 1_000
    /// A request still unanswered after this long gets 503 (default 15 s).
    package var requestTimeoutSeconds = 15
    /// Idle or trickling connections are closed after this long (default 30 s).
    package var idleTimeoutSeconds = 30
    /// After SIGTERM, how long `/readyz` answers 503 while every request is still served, so a load balancer stops
    /// sending before the server stops accepting (default 0: stop accepting at once). Then in-flight requests finish.
    package var shutdownGraceSeconds = 0
    /// Where the caller keys come from (`caller_keys_env` / `caller_keys_file`) and the config key that named it.
    /// Only `serve` loads them (``loadCallerKeys(environment:)``): `verify` and `batch` need no caller keys.
    package var callerKeysSource: (source: CallerKeys.Source, key: String)? = nil
    /// When set, every `/v1/` request must carry one of these keys in `X-Tokenguard-Key`.
    package var callerKeys: CallerKeys? = nil
    /// Where the admin keys come from (`admin_keys_env` / `admin_keys_file`); loaded by `serve` like caller keys.
    package var adminKeysSource: (source: CallerKeys.Source, key: String)? = nil
    /// When set, revocation writes need one of these in `X-Tokenguard-Admin-Key`; without them, loopback peers only.
    package var adminKeys: CallerKeys? = nil
    /// Seconds suggested in `Retry-After` when keys or a provider are unavailable.
    package var retryAfterSeconds = 5

    package init() {}

    /// Loads the caller keys the config names (for `serve`): a config error when they cannot be read or are unusable.
    package mutating func loadCallerKeys(environment: [String: String]) throws(ConfigError) {
        if let (source, key) = callerKeysSource { callerKeys = try CallerKeys(source: source, key: key, environment: environment) }
        if let (source, key) = adminKeysSource { adminKeys = try CallerKeys(source: source, key: key, environment: environment) }
    }

    package static func == (lhs: ServerLimits, rhs: ServerLimits) -> Bool {
        lhs.maximumVerifyBodyBytes == rhs.maximumVerifyBodyBytes && lhs.maximumBatchBodyBytes == rhs.maximumBatchBodyBytes
            && lhs.maximumBatchItems == rhs.maximumBatchItems && lhs.requestTimeoutSeconds == rhs.requestTimeoutSeconds
            && lhs.idleTimeoutSeconds == rhs.idleTimeoutSeconds && lhs.shutdownGraceSeconds == rhs.shutdownGraceSeconds
            && lhs.callerKeysSource?.source == rhs.callerKeysSource?.source
            && lhs.adminKeysSource?.source == rhs.adminKeysSource?.source
            && lhs.retryAfterSeconds == rhs.retryAfterSeconds
    }
}

/// One entry under `providers:`.
package struct ProviderConfiguration: Sendable {
    package let name: String
    package let kind: ProviderKind
    package let settings: Settings
    /// `dev_idp: true`: this provider trusts a local development IdP over plain http on loopback. The service
    /// warns loudly while one is trusted; never set it in production.
    package var devIdP = false
    /// `replay: false`: this provider is left out of replay protection.
    package var replayOptOut = false
    /// How `/v1/authz/{provider}` reads and answers (`forward_auth`; defaults when the block is absent).
    package var forwardAuth = ForwardAuthPolicy()
    /// Microsoft `tenants` given by domain name, resolved to GUIDs through the authority's discovery documents.
    package var tenantDomains: [String] = []
    /// The Microsoft authority (`authority`; national clouds), for tenant-name resolution.
    package var authority = ProviderPolicy.microsoftAuthority

    package init(name: String, kind: ProviderKind, settings: Settings, devIdP: Bool = false) {
        self.name = name
        self.kind = kind
        self.settings = settings
        self.devIdP = devIdP
    }

    package enum Settings: Sendable {
        /// A JWS ID-token provider: its policy and where its keys come from.
        case jws(ProviderPolicy, KeyLocation)
        /// An opaque access-token provider checked through its inspection API.
        case opaque(OpaqueProviderSettings)
        /// `facebook`: Limited Login tokens verified as `facebook_limited`, classic access tokens (when the app
        /// secret is configured) through `debug_token`.
        case facebook(ProviderPolicy, KeyLocation, OpaqueProviderSettings?)
    }

    package var policy: ProviderPolicy? {
        switch settings {
        case .jws(let policy, _), .facebook(let policy, _, _): return policy
        case .opaque: return nil
        }
    }

    /// True when the provider's tokens are checked by calling its inspection API (every uncached sign-in is an
    /// outbound call), not only its keys fetched now and then.
    package var inspectsOpaqueTokens: Bool {
        switch settings {
        case .opaque, .facebook(_, _, .some): return true
        case .jws, .facebook(_, _, .none): return false
        }
    }

    /// True when the provider makes outbound calls: keys fetched from a URL or found by discovery, tenant names
    /// resolved, or tokens inspected. Only a provider with a `jwks_file` and nothing else never calls out.
    package var callsOut: Bool {
        if case .jwksFile? = keys { return !tenantDomains.isEmpty || inspectsOpaqueTokens }
        return true
    }

    package var keys: KeyLocation? {
        switch settings {
        case .jws(_, let keys), .facebook(_, let keys, _): return keys
        case .opaque: return nil
        }
    }

    package enum KeyLocation: Sendable, Equatable {
        case jwksURL(String)
        case jwksFile(String)
        /// Found through `{issuer}/.well-known/openid-configuration` (kind `oidc` with only an `issuer`). The
        /// discovered `jwks_uri` must be https on the issuer's host or one of `jwksHosts` (plain http only to the
        /// issuer's own loopback host, with `dev_idp`).
        case discovery(issuer: String, jwksHosts: [String], devIdP: Bool)
    }
}

/// Settings of a `github` or `facebook_classic` provider. The secret comes from the environment or a file of its own
/// (re-read when it changes), never the config file.
package struct OpaqueProviderSettings: Sendable {
    /// GitHub `client_id`, or the Facebook `app_id`.
    package let clientID: String
    package let secret: SecretValue
    /// Where the secret came from: `env NAME` or `file PATH` (for messages; the secret itself is never printed).
    package let secretSource: String
    /// `api_url` (GitHub) or `graph_url` (Facebook).
    package let baseURL: String
    /// How long a positive answer is cached (default 60 s; never past the token's own expiry).
    package let cacheSeconds: Double
    /// Bounds on calls to the inspection API (`max_concurrent_inspections`, `max_inspections_per_second`).
    package var inspectionLimits = InspectionLimiter.Limits()
}

extension Configuration {
    /// Largest config file read.
    package static let maximumFileBytes = 1 << 20

    /// Loads the file at `path`, or the one `TOKENGUARD_CONFIG` names when `path` is nil.
    package static func load(path: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> Configuration
    {
        guard let path = path ?? environment["TOKENGUARD_CONFIG"] else {
            throw ConfigError("", "no config file given (--config FILE or TOKENGUARD_CONFIG)")
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw ConfigError("", "cannot read config file \(path)") }
        guard data.count <= maximumFileBytes else { throw ConfigError("", "config file \(path) is larger than 1 MiB") }
        guard let text = String(data: data, encoding: .utf8) else { throw ConfigError("", "config file \(path) is not UTF-8") }
        let directory = (path as NSString).deletingLastPathComponent
        var configuration = try parse(yaml: text, baseDirectory: directory.isEmpty ? "." : directory, environment: environment)
        try configuration.applyEnvironmentOverrides(environment)
        return configuration
    }

    /// Parses configuration text. Relative `jwks_file` paths are resolved against `baseDirectory`.
    package static func parse(
        yaml: String, baseDirectory: String = ".", environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigError) -> Configuration {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: yaml) else { return Configuration() }
            root = node
        } catch {
            throw ConfigError("", "not valid YAML: \(error)")
        }
        let top = try ConfigNode(root, key: "").mapping(allowed: [
            "listen", "leeway_seconds", "max_token_bytes", "key_archive", "replay", "providers", "keys", "http", "server", "token_cache_size",
            "revocations", "redis",
        ])
        var configuration = Configuration()
        if let listen = top["listen"] { configuration.listen = try validatedListen(try listen.string(), key: listen.key) }
        if let leeway = top["leeway_seconds"] { configuration.leewaySeconds = Int64(try leeway.int(in: 0...600)) }
        if let max = top["max_token_bytes"] { configuration.maxTokenBytes = try max.int(in: 512...1_048_576) }
        if let archive = top["key_archive"] {
            let path = try archive.string()
            // "" turns the archive off (and with it the SQLite revocation store's default place: revocations then
            // live in memory unless revocations.path is set).
            configuration.keyArchive = path.isEmpty ? "" : path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"
        }
        if let keys = top["keys"] {
            let fields = try keys.mapping(allowed: ["min_ttl_seconds", "max_ttl_seconds", "refetch_cooldown_seconds", "max_stale_seconds"])
            var policy = KeyFetchPolicy()
            if let value = fields["min_ttl_seconds"] { policy.minimumTTL = Double(try value.int(in: 0...604_800)) }
            if let value = fields["max_ttl_seconds"] { policy.maximumTTL = Double(try value.int(in: 1...604_800)) }
            if let value = fields["refetch_cooldown_seconds"] { policy.unknownKeyCooldown = Double(try value.int(in: 0...86_400)) }
            if let value = fields["max_stale_seconds"] { policy.maximumStaleAge = Double(try value.int(in: 60...2_592_000)) }
            guard policy.minimumTTL <= policy.maximumTTL else { throw ConfigError(keys.key, "min_ttl_seconds must not exceed max_ttl_seconds") }
            configuration.keyFetch = policy
        }
        if let http = top["http"] {
            let fields = try http.mapping(allowed: ["connect_timeout_ms", "timeout_ms", "ca_file"])
            if let node = fields["ca_file"] {
                let path = try node.string()
                let resolved = path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"
                guard let data = FileManager.default.contents(atPath: resolved), data.count <= 4 << 20,
                    String(decoding: data, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----")
                else { throw ConfigError(node.key, "cannot read PEM certificates from \(resolved)") }
                configuration.extraCAFile = resolved
            }
            if let value = fields["connect_timeout_ms"] { configuration.connectTimeoutMilliseconds = try value.int(in: 100...60_000) }
            if let value = fields["timeout_ms"] { configuration.totalTimeoutMilliseconds = try value.int(in: 100...120_000) }
        }
        if let size = top["token_cache_size"] { configuration.tokenCacheSize = try size.int(in: 0...10_000_000) }
        if let server = top["server"] {
            let fields = try server.mapping(allowed: [
                "max_verify_body_bytes", "max_batch_body_bytes", "max_batch_items", "request_timeout_seconds", "idle_timeout_seconds",
                "shutdown_grace_seconds", "caller_keys_env", "caller_keys_file", "admin_keys_env", "admin_keys_file",
            ])
            var limits = ServerLimits()
            if let value = fields["max_verify_body_bytes"] { limits.maximumVerifyBodyBytes = try value.int(in: 1024...(16 << 20)) }
            if let value = fields["max_batch_body_bytes"] { limits.maximumBatchBodyBytes = try value.int(in: 1024...(64 << 20)) }
            if let value = fields["max_batch_items"] { limits.maximumBatchItems = try value.int(in: 1...100_000) }
            if let value = fields["request_timeout_seconds"] { limits.requestTimeoutSeconds = try value.int(in: 1...600) }
            if let value = fields["idle_timeout_seconds"] { limits.idleTimeoutSeconds = try value.int(in: 1...3600) }
            if let value = fields["shutdown_grace_seconds"] { limits.shutdownGraceSeconds = try value.int(in: 0...300) }
            switch (fields["caller_keys_env"], fields["caller_keys_file"]) {
            case (.some(let env), .some): throw ConfigError(env.key, "give caller_keys_env or caller_keys_file, not both")
            case (.some(let env), nil):
                limits.callerKeysSource = (.environment(name: try env.string()), env.key)
            case (nil, .some(let file)):
                let path = try file.string()
                limits.callerKeysSource = (.file(path: path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"), file.key)
            case (nil, nil): break
            }
            switch (fields["admin_keys_env"], fields["admin_keys_file"]) {
            case (.some(let env), .some): throw ConfigError(env.key, "give admin_keys_env or admin_keys_file, not both")
            case (.some(let env), nil):
                limits.adminKeysSource = (.environment(name: try env.string()), env.key)
            case (nil, .some(let file)):
                let path = try file.string()
                limits.adminKeysSource = (.file(path: path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"), file.key)
            case (nil, nil): break
            }
            configuration.server = limits
        }
        if let redis = top["redis"] {
            let fields = try redis.mapping(allowed: [
                "url", "password_env", "password_file", "sentinels", "master_name", "sentinel_password_env", "sentinel_password_file",
            ])
            guard let urlNode = fields["url"] else { throw ConfigError("\(redis.key).url", "is required") }
            let url = try urlNode.string()
            // Secrets never live in the file (and the URL is shown by /readyz); a URL hiredis cannot dial is refused here.
            if case .failure(let error) = RedisURL.parse(url) { throw ConfigError(urlNode.key, error.description) }
            var settings = RedisSettings(url: url)
            settings.password = try Self.redisPassword(
                fields, env: "password_env", file: "password_file", environment: environment, baseDirectory: baseDirectory)
            if let sentinelsNode = fields["sentinels"] {
                for entry in try sentinelsNode.stringList() {
                    guard let (host, port) = RedisURL.hostPort(Substring(entry)) else {
                        throw ConfigError(sentinelsNode.key, "each sentinel must be HOST:PORT ([IPv6]:PORT)")
                    }
                    settings.sentinels.append((host, port))
                }
                guard !settings.sentinels.isEmpty else { throw ConfigError(sentinelsNode.key, "must name at least one sentinel") }
                guard let master = fields["master_name"] else { throw ConfigError("\(redis.key).master_name", "is required with sentinels") }
                settings.masterName = try master.string()
                settings.sentinelPassword = try Self.redisPassword(
                    fields, env: "sentinel_password_env", file: "sentinel_password_file", environment: environment, baseDirectory: baseDirectory)
            } else if let stray = fields["master_name"] ?? fields["sentinel_password_env"] ?? fields["sentinel_password_file"] {
                throw ConfigError(stray.key, "only applies with sentinels")
            }
            configuration.redis = settings
        }
        if let revocations = top["revocations"] {
            let fields = try revocations.mapping(allowed: ["store", "max_staleness_seconds", "path"])
            var settings = RevocationSettings()
            if let value = fields["max_staleness_seconds"] { settings.maximumStalenessSeconds = try value.int(in: 1...3600) }
            switch try fields["store"]?.string() ?? "sqlite" {
            case "sqlite":
                let path = try fields["path"]?.string()
                settings.store = .sqlite(path: path.map { $0.hasPrefix("/") ? $0 : "\(baseDirectory)/\($0)" })
            case "redis":
                if let path = fields["path"] { throw ConfigError(path.key, "only applies to store: sqlite") }
                settings.store = .redis
            case let other:
                throw ConfigError("\(revocations.key).store", "must be sqlite or redis, not \(other)")
            }
            configuration.revocations = settings
        }
        if let replay = top["replay"] {
            let fields = try replay.mapping(allowed: ["store", "redis_url", "max_entries"])
            switch try fields["store"]?.string() ?? "memory" {
            case "memory":
                if let url = fields["redis_url"] { throw ConfigError(url.key, "only applies to store: redis") }
                let maximum = try fields["max_entries"]?.int(in: 1...100_000_000) ?? 1_000_000
                configuration.replay = ReplaySettings(store: .memory(maximumEntries: maximum))
            case "redis":
                guard let urlNode = fields["redis_url"] else {
                    guard let shared = configuration.redis else {
                        throw ConfigError("\(replay.key).redis_url", "is required for store: redis (or a redis: block)")
                    }
                    if let maximum = fields["max_entries"] { throw ConfigError(maximum.key, "only applies to store: memory") }
                    configuration.replay = ReplaySettings(store: .redis(url: shared.url))
                    break
                }
                let url = try urlNode.string()
                // One server, named once: a second spelling would connect without the block's password.
                if configuration.redis != nil {
                    throw ConfigError(urlNode.key, "leave it out: with a redis: block, store: redis uses redis.url (and its password)")
                }
                // Secrets never live in the file (and this URL is shown by /readyz): no user or password here; users and
                // database indexes belong to the redis: block.
                guard !url.contains("@") else { throw ConfigError(urlNode.key, "must not carry a user or password: redis://HOST:PORT") }
                switch RedisURL.parse(url) {
                case .failure(let error): throw ConfigError(urlNode.key, error.description)
                case .success(let parsed) where parsed.database != nil:
                    throw ConfigError(urlNode.key, "a database index is not supported here (use the redis: block): redis://HOST:PORT")
                case .success: break
                }
                if let maximum = fields["max_entries"] { throw ConfigError(maximum.key, "only applies to store: memory") }
                configuration.replay = ReplaySettings(store: .redis(url: url))
            case let other:
                throw ConfigError("\(replay.key).store", "must be memory or redis, not \(other)")
            }
        }
        if let providers = top["providers"] {
            var seen: Set<ByteKey> = []
            for (name, node) in try providers.entries() {
                // Provider names are identities that requests must match byte for byte: plain ASCII only, so no two
                // names can be different bytes yet equal as Swift strings, and each appears once (YAML would let
                // `1:` and `"1":` both through).
                // "." and ".." are path segments with a meaning of their own (a provider name is one in /v1/authz/{provider}).
                guard !name.isEmpty, name.utf8.count <= 64, name != ".", name != "..",
                    name.utf8.allSatisfy({ CompactJWSAlphabet.isAllowed($0) })
                else { throw ConfigError(node.key, "a provider name must be 1 to 64 characters of A-Z, a-z, 0-9, -, _ and . (not . or ..)") }
                guard seen.insert(ByteKey(name)).inserted else { throw ConfigError(node.key, "provider \(name) is configured twice") }
                configuration.providers.append(
                    try parseProvider(name: name, node: node, defaults: configuration, baseDirectory: baseDirectory, environment: environment))
            }
        }
        return configuration
    }

    /// Microsoft `tenants`: `*`, `organizations` or `consumers` alone, or tenant GUIDs and domain names
    /// (`contoso.onmicrosoft.com`, resolved to GUIDs when keys are fetched).
    static func parseTenants(_ entries: [String], key: String) throws(ConfigError) -> (TenantRule, [String]) {
        if let rule = TenantRule.parse(entries) { return (rule, []) }
        var guids: Set<String> = []
        var domains: [String] = []
        for entry in entries {
            let lower = ASCII.lowercased(entry)
            if GUID.isValid(lower) {
                guids.insert(lower)
            } else if lower.utf8.contains(UInt8(ascii: ".")), OutboundURL.isPlausibleHost(lower), !domains.contains(lower) {
                domains.append(lower)
            } else {
                throw ConfigError(
                    key,
                    "\"\(entry.excerpt(bytes: 64))\" is not a tenant: use [\"*\"], [\"organizations\"], [\"consumers\"] or tenant GUIDs and domain names"
                )
            }
        }
        guard !domains.isEmpty || !guids.isEmpty else { throw ConfigError(key, "must not be empty") }
        return (.list(guids), domains)
    }

    /// A Redis password from `env` (set and not empty now) or `file` (readable now), or none.
    static func redisPassword(
        _ fields: [String: ConfigNode], env: String, file: String, environment: [String: String], baseDirectory: String
    ) throws(ConfigError) -> RedisSettings.Password? {
        switch (fields[env], fields[file]) {
        case (.some(let envNode), .some): throw ConfigError(envNode.key, "give \(env) or \(file), not both")
        case (.some(let envNode), nil):
            let name = try envNode.string()
            guard let value = environment[name], !value.isEmpty else { throw ConfigError(envNode.key, "environment variable \(name) is not set") }
            return .environment(name)
        case (nil, .some(let fileNode)):
            let path = try fileNode.string()
            let resolved = path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"
            guard FileManager.default.isReadableFile(atPath: resolved) else { throw ConfigError(fileNode.key, "cannot read \(resolved)") }
            return .file(resolved)
        case (nil, nil): return nil
        }
    }

    package static func validatedListen(_ value: String, key: String) throws(ConfigError) -> String {
        guard let colon = value.lastIndex(of: ":"), let port = Int(value[value.index(after: colon)...]), (0...65535).contains(port),
            colon > value.startIndex
        else { throw ConfigError(key, "must be HOST:PORT, e.g. 127.0.0.1:8080") }
        return value
    }

    static func parseProvider(
        name: String, node: ConfigNode, defaults: Configuration, baseDirectory: String, environment: [String: String]
    ) throws(ConfigError) -> ProviderConfiguration {
        let kindName = try node.mapping(allowed: nil)["kind"]?.string() ?? name
        guard let kind = ProviderKind(rawValue: kindName) else {
            let kinds = ProviderKind.allCases.map(\.rawValue).joined(separator: ", ")
            throw ConfigError("\(node.key).kind", "unknown provider kind \"\(kindName)\" (kinds: \(kinds); set kind: for a custom name)")
        }
        if kind == .facebook {
            return try parseFacebook(name: name, node: node, defaults: defaults, baseDirectory: baseDirectory, environment: environment)
        }
        guard kind.isJWS else {
            return try parseOpaqueProvider(name: name, kind: kind, node: node, baseDirectory: baseDirectory, environment: environment)
        }
        let fields = try node.mapping(allowed: [
            "kind", "audiences", "issuer", "jwks_url", "jwks_file", "nonce", "nonce_required", "tenants", "algorithms", "dev_idp", "replay",
            "jwks_hosts", "token_types", "authorized_parties", "forward_auth", "authority", "token_versions", "app_signing_keys", "tenant_id",
            "tenant_subdomain",
        ])
        for key in ["authority", "token_versions", "app_signing_keys"] where kind != .microsoft {
            if let node = fields[key] { throw ConfigError(node.key, "only applies to kind microsoft") }
        }
        for key in ["tenant_id", "tenant_subdomain"] where kind != .microsoftExternalID {
            if let node = fields[key] { throw ConfigError(node.key, "only applies to kind microsoft_external_id") }
        }
        let devIdP = try fields["dev_idp"]?.bool() ?? false
        let replayOptOut = try (fields["replay"]?.bool()).map { !$0 } ?? false
        guard let audiencesNode = fields["audiences"] else { throw ConfigError("\(node.key).audiences", "is required") }
        let audiences = try audiencesNode.stringList()
        guard !audiences.isEmpty, audiences.allSatisfy({ !$0.isEmpty }) else {
            throw ConfigError(audiencesNode.key, "must be a non-empty list of non-empty strings")
        }

        var policy: ProviderPolicy
        var tenantDomains: [String] = []
        var authority = ProviderPolicy.microsoftAuthority
        var microsoftJWKS: String? = nil
        switch kind {
        case .apple: policy = .apple(name: name, audiences: audiences)
        case .facebookLimited: policy = .facebookLimited(name: name, audiences: audiences)
        case .microsoft:
            // Required: a Microsoft app that names no tenant would accept every Entra tenant's users ("*" says so).
            guard let tenantsNode = fields["tenants"] else {
                throw ConfigError(
                    "\(node.key).tenants",
                    "is required for kind microsoft: list your tenant GUIDs, or \"organizations\", \"consumers\" or \"*\" to accept every tenant")
            }
            if let node = fields["authority"] {
                authority = try node.url(allowLoopbackHTTP: devIdP)
                while authority.hasSuffix("/") { authority.removeLast() }
                let afterScheme = authority.drop { $0 != "/" }.dropFirst(2)
                guard !afterScheme.contains("/"), !afterScheme.contains("?"), !afterScheme.contains("#") else {
                    throw ConfigError(node.key, "must be the authority's origin (no path, query or fragment), e.g. https://login.microsoftonline.us")
                }
                // The origin goes into the issuer template as it is: a `{tenantid}` in it would be a second placeholder
                // (red team 60). A URL check passes it only because issuer templates may hold one.
                guard !afterScheme.contains("{"), !afterScheme.contains("}") else {
                    throw ConfigError(node.key, "must be a plain origin: a host name holds no { or } (the tenant goes in the path)")
                }
            }
            let entries = try tenantsNode.stringList()
            let (rule, domains) = try parseTenants(entries, key: tenantsNode.key)
            tenantDomains = domains
            policy = .microsoft(name: name, audiences: audiences, tenants: rule)
            policy.issuers = .tenantTemplate("\(authority)/{tenantid}/v2.0")
            if let node = fields["token_versions"] {
                let versions = try node.stringList()
                guard !versions.isEmpty, versions.allSatisfy({ $0 == "1" || $0 == "2" }) else {
                    throw ConfigError(node.key, "must list 1, 2 or both")
                }
                policy.acceptsV2Tokens = versions.contains("2")
                policy.v1IssuerTemplate = versions.contains("1") ? ProviderPolicy.microsoftV1IssuerTemplate : nil
            }
            microsoftJWKS = "\(authority)/common/discovery/v2.0/keys"
            if try fields["app_signing_keys"]?.bool() ?? false {
                // Apps with claims mapping get tokens signed by keys published only for them.
                guard let appID = audiences.first, !appID.isEmpty,
                    appID.utf8.allSatisfy({ (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) || $0 == UInt8(ascii: "-") })
                else {
                    throw ConfigError("\(node.key).audiences", "the first audience (the app id) cannot go into a URL")
                }
                microsoftJWKS! += "?appid=\(appID)"
            }
        case .microsoftExternalID:
            guard let tenantNode = fields["tenant_id"], let subdomainNode = fields["tenant_subdomain"] else {
                throw ConfigError(node.key, "kind microsoft_external_id needs tenant_id (a GUID) and tenant_subdomain")
            }
            let tenantID = ASCII.lowercased(try tenantNode.string())
            guard GUID.isValid(tenantID) else { throw ConfigError(tenantNode.key, "must be the tenant GUID") }
            let subdomain = ASCII.lowercased(try subdomainNode.string())
            guard !subdomain.isEmpty, subdomain.utf8.count <= 63,
                subdomain.utf8.allSatisfy({ (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "-") })
            else { throw ConfigError(subdomainNode.key, "must be the tenant's subdomain (contoso for contoso.ciamlogin.com)") }
            policy = .microsoftExternalID(name: name, tenantID: tenantID, audiences: audiences)
            microsoftJWKS = "https://\(subdomain).ciamlogin.com/\(tenantID)/discovery/v2.0/keys"
        case .oidc:
            guard let issuerNode = fields["issuer"] else { throw ConfigError("\(node.key).issuer", "is required for kind oidc") }
            policy = .oidc(name: name, issuer: try issuerNode.url(allowLoopbackHTTP: devIdP), audiences: audiences)
        case .github, .facebookClassic, .facebook:
            throw ConfigError(node.key, "not a JWS provider")
        }
        if kind != .oidc, let issuerNode = fields["issuer"] {
            let issuer = try issuerNode.url(allowLoopbackHTTP: devIdP)
            policy.issuers = kind == .microsoft || kind == .microsoftExternalID ? .tenantTemplate(issuer) : .exact([issuer])
        }
        if kind != .microsoft, let tenants = fields["tenants"] { throw ConfigError(tenants.key, "only applies to kind microsoft") }
        if kind != .oidc, let hosts = fields["jwks_hosts"] { throw ConfigError(hosts.key, "only applies to kind oidc (discovered keys)") }
        if let nonceNode = fields["nonce"] {
            guard let mode = NonceMode(rawValue: try nonceNode.string()) else { throw ConfigError(nonceNode.key, "must be sha256 or raw") }
            policy.nonceMode = mode
        }
        if let required = fields["nonce_required"] { policy.nonceRequired = try required.bool() }
        if let algorithmsNode = fields["algorithms"] {
            var algorithms: Set<SignatureAlgorithm> = []
            for entry in try algorithmsNode.stringList() {
                guard let alg = SignatureAlgorithm(rawValue: entry) else {
                    throw ConfigError(algorithmsNode.key, "\"\(entry)\" is not an accepted algorithm (RS/PS/ES 256/384/512, EdDSA)")
                }
                algorithms.insert(alg)
            }
            guard !algorithms.isEmpty else { throw ConfigError(algorithmsNode.key, "must not be empty") }
            policy.algorithms = algorithms
        }
        if let typesNode = fields["token_types"] {
            let types = try typesNode.stringList()
            guard !types.isEmpty, types.allSatisfy({ $0.utf8.count <= 64 && $0.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F } }) else {
                throw ConfigError(typesNode.key, "must be a non-empty list of ASCII typ values (\"\" stands for no typ)")
            }
            policy.tokenTypes = types.map(ASCII.lowercased)
        }
        if let partiesNode = fields["authorized_parties"] {
            let parties = try partiesNode.stringList()
            guard !parties.isEmpty, parties.allSatisfy({ !$0.isEmpty }) else {
                throw ConfigError(partiesNode.key, "must be a non-empty list of non-empty strings")
            }
            policy.authorizedParties = parties
        }
        var jwksHosts: [String] = []
        if let hostsNode = fields["jwks_hosts"] {
            jwksHosts = try hostsNode.stringList().map(ASCII.lowercased)
            guard jwksHosts.allSatisfy(OutboundURL.isPlausibleHost) else {
                throw ConfigError(hostsNode.key, "must be a list of host names (no scheme, path or port)")
            }
        }
        policy.leewaySeconds = defaults.leewaySeconds
        policy.maxTokenBytes = defaults.maxTokenBytes

        let keys: ProviderConfiguration.KeyLocation
        switch (fields["jwks_url"], fields["jwks_file"]) {
        case (.some(let url), .some):
            throw ConfigError(url.key, "give jwks_url or jwks_file, not both")
        case (.some(let url), nil):
            keys = .jwksURL(try url.url(allowLoopbackHTTP: devIdP))
        case (nil, .some(let file)):
            let path = try file.string()
            keys = .jwksFile(path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)")
        case (nil, nil):
            switch kind {
            case .microsoft, .microsoftExternalID: keys = .jwksURL(microsoftJWKS ?? defaultJWKSURL(.microsoft)!)
            case .apple, .facebookLimited: keys = .jwksURL(defaultJWKSURL(kind)!)
            case .oidc:
                guard case .exact(let issuers) = policy.issuers, let issuer = issuers.first else {
                    throw ConfigError("\(node.key).jwks_url", "is required")
                }
                keys = .discovery(issuer: issuer, jwksHosts: jwksHosts, devIdP: devIdP)
            default: throw ConfigError("\(node.key).jwks_url", "is required for kind \(kind.rawValue) (or jwks_file)")
            }
        }
        var provider = ProviderConfiguration(name: name, kind: kind, settings: .jws(policy, keys), devIdP: devIdP)
        provider.replayOptOut = replayOptOut
        provider.tenantDomains = tenantDomains
        provider.authority = authority
        if let block = fields["forward_auth"] { provider.forwardAuth = try parseForwardAuth(block) }
        return provider
    }

    static func parseOpaqueProvider(
        name: String, kind: ProviderKind, node: ConfigNode, baseDirectory: String, environment: [String: String]
    ) throws(ConfigError) -> ProviderConfiguration {
        let isGitHub = kind == .github
        let (idKey, secretKey, urlKey) = isGitHub ? ("client_id", "client_secret_env", "api_url") : ("app_id", "app_secret_env", "graph_url")
        let secretFileKey = isGitHub ? "client_secret_file" : "app_secret_file"
        let fields = try node.mapping(allowed: [
            "kind", idKey, secretKey, secretFileKey, urlKey, "cache_seconds", "dev_idp", "forward_auth", "max_concurrent_inspections",
            "max_inspections_per_second",
        ])
        let devIdP = try fields["dev_idp"]?.bool() ?? false
        guard let idNode = fields[idKey] else { throw ConfigError("\(node.key).\(idKey)", "is required for kind \(kind.rawValue)") }
        let clientID = try idNode.string()
        let idIsValid =
            isGitHub
            ? !clientID.isEmpty && clientID.count <= 64
                && clientID.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") }
            : !clientID.isEmpty && clientID.count <= 32 && clientID.allSatisfy { $0.isASCII && $0.isNumber }
        guard idIsValid else { throw ConfigError(idNode.key, isGitHub ? "is not a GitHub client id" : "must be the numeric Facebook app id") }
        guard
            let (secret, source) = try secretSetting(
                fields[secretKey], fields[secretFileKey], node: node, envKey: secretKey, baseDirectory: baseDirectory, environment: environment)
        else {
            throw ConfigError("\(node.key).\(secretKey)", "is required (or \(secretFileKey)): where the secret is, never the secret itself")
        }
        let baseURL = try fields[urlKey]?.url(allowLoopbackHTTP: devIdP) ?? (isGitHub ? "https://api.github.com" : "https://graph.facebook.com")
        let cacheSeconds = Double(try fields["cache_seconds"]?.int(in: 0...3600) ?? 60)
        var limits = InspectionLimiter.Limits()
        if let value = fields["max_concurrent_inspections"] { limits.maximumConcurrent = try value.int(in: 1...1024) }
        if let value = fields["max_inspections_per_second"] { limits.maximumPerSecond = Double(try value.int(in: 1...100_000)) }
        var provider = ProviderConfiguration(
            name: name, kind: kind,
            settings: .opaque(
                OpaqueProviderSettings(
                    clientID: clientID, secret: secret, secretSource: source, baseURL: baseURL, cacheSeconds: cacheSeconds,
                    inspectionLimits: limits)),
            devIdP: devIdP)
        if let block = fields["forward_auth"] { provider.forwardAuth = try parseForwardAuth(block) }
        return provider
    }

    /// A `facebook` provider: `app_id` is the Limited Login audience and the classic tokens' app; `app_secret_env`
    /// (needed for classic tokens) is optional — without it classic tokens are refused as `invalid_request`.
    static func parseFacebook(
        name: String, node: ConfigNode, defaults: Configuration, baseDirectory: String, environment: [String: String]
    ) throws(ConfigError) -> ProviderConfiguration {
        let fields = try node.mapping(allowed: [
            "kind", "app_id", "app_secret_env", "app_secret_file", "graph_url", "jwks_url", "jwks_file", "cache_seconds", "dev_idp", "replay",
            "nonce_required",
            "forward_auth", "max_concurrent_inspections", "max_inspections_per_second",
        ])
        let devIdP = try fields["dev_idp"]?.bool() ?? false
        guard let idNode = fields["app_id"] else { throw ConfigError("\(node.key).app_id", "is required for kind facebook") }
        let appID = try idNode.string()
        guard !appID.isEmpty, appID.utf8.count <= 32, appID.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw ConfigError(idNode.key, "must be the numeric Facebook app id")
        }
        var policy = ProviderPolicy.facebookLimited(name: name, audiences: [appID])
        policy.leewaySeconds = defaults.leewaySeconds
        policy.maxTokenBytes = defaults.maxTokenBytes
        if let required = fields["nonce_required"] { policy.nonceRequired = try required.bool() }
        let keys: ProviderConfiguration.KeyLocation
        switch (fields["jwks_url"], fields["jwks_file"]) {
        case (.some(let url), .some): throw ConfigError(url.key, "give jwks_url or jwks_file, not both")
        case (.some(let url), nil): keys = .jwksURL(try url.url(allowLoopbackHTTP: devIdP))
        case (nil, .some(let file)):
            let path = try file.string()
            keys = .jwksFile(path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)")
        case (nil, nil): keys = .jwksURL(defaultJWKSURL(.facebookLimited)!)
        }
        var classic: OpaqueProviderSettings? = nil
        if let (secret, source) = try secretSetting(
            fields["app_secret_env"], fields["app_secret_file"], node: node, envKey: "app_secret_env", baseDirectory: baseDirectory,
            environment: environment)
        {
            var limits = InspectionLimiter.Limits()
            if let value = fields["max_concurrent_inspections"] { limits.maximumConcurrent = try value.int(in: 1...1024) }
            if let value = fields["max_inspections_per_second"] { limits.maximumPerSecond = Double(try value.int(in: 1...100_000)) }
            classic = OpaqueProviderSettings(
                clientID: appID, secret: secret, secretSource: source,
                baseURL: try fields["graph_url"]?.url(allowLoopbackHTTP: devIdP) ?? "https://graph.facebook.com",
                cacheSeconds: Double(try fields["cache_seconds"]?.int(in: 0...3600) ?? 60), inspectionLimits: limits)
        } else {
            for key in ["graph_url", "cache_seconds", "max_concurrent_inspections", "max_inspections_per_second"] {
                if let node = fields[key] { throw ConfigError(node.key, "applies to classic tokens: set app_secret_env too") }
            }
        }
        var provider = ProviderConfiguration(name: name, kind: .facebook, settings: .facebook(policy, keys, classic), devIdP: devIdP)
        provider.replayOptOut = try (fields["replay"]?.bool()).map { !$0 } ?? false
        if let block = fields["forward_auth"] { provider.forwardAuth = try parseForwardAuth(block) }
        return provider
    }

    /// A secret named by `*_env` (read now) or `*_file` (read now and again when it changes), or nil when neither is set.
    static func secretSetting(
        _ env: ConfigNode?, _ file: ConfigNode?, node: ConfigNode, envKey: String, baseDirectory: String, environment: [String: String]
    ) throws(ConfigError) -> (SecretValue, String)? {
        switch (env, file) {
        case (.some(let env), .some): throw ConfigError(env.key, "give \(envKey) or the _file form, not both")
        case (.some(let env), nil):
            let variable = try env.string()
            guard let secret = environment[variable], !secret.isEmpty else {
                throw ConfigError(
                    env.key, "environment variable \(variable) is not set (secrets come from the environment or a file, never the config)")
            }
            return (SecretValue(secret), "env \(variable)")
        case (nil, .some(let file)):
            let path = try file.string()
            let resolved = path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"
            return (try SecretValue(file: resolved, key: file.key), "file \(resolved)")
        case (nil, nil): return nil
        }
    }

    /// A provider's `forward_auth` block: header and cookie names are validated, claim headers checked for
    /// names that could never be claims and for duplicates (names are case-insensitive).
    static func parseForwardAuth(_ node: ConfigNode) throws(ConfigError) -> ForwardAuthPolicy {
        let fields = try node.mapping(allowed: ["token_header", "token_cookie", "nonce_header", "mode", "claim_headers"])
        var policy = ForwardAuthPolicy()
        func headerName(_ node: ConfigNode) throws(ConfigError) -> String {
            let name = try node.string()
            guard !name.isEmpty, name.utf8.count <= 64, name.utf8.allSatisfy(HTTPToken.isTokenCharacter) else {
                throw ConfigError(node.key, "must be an HTTP header name (RFC 9110 token characters)")
            }
            let lower = ASCII.lowercased(name)
            // The token or nonce must not come from a header with another job (the caller key, the cookie jar,
            // framing): reading X-Tokenguard-Key as the token would send the caller key to an inspection API.
            guard lower == "authorization" || lower == "x-tokenguard-nonce" || !ClaimHeader.reservedNames.contains(lower),
                lower == "x-tokenguard-nonce" || !ClaimHeader.reservedPrefixes.contains(where: { lower.hasPrefix($0) })
            else { throw ConfigError(node.key, "\(lower) is reserved: name the header your gateway puts the token or nonce in") }
            return lower
        }
        if let node = fields["token_header"] { policy.tokenHeader = node.isNull ? nil : try headerName(node) }
        if let node = fields["token_cookie"], !node.isNull {
            let name = try node.string()
            guard !name.isEmpty, name.utf8.count <= 64, name.utf8.allSatisfy(HTTPToken.isTokenCharacter) else {
                throw ConfigError(node.key, "must be a cookie name (RFC 6265 token characters)")
            }
            policy.tokenCookie = name
        }
        guard policy.tokenHeader != nil || policy.tokenCookie != nil else {
            throw ConfigError(node.key, "needs token_header or token_cookie (or both)")
        }
        if let node = fields["nonce_header"] {
            policy.nonceHeader = try headerName(node)
            if policy.nonceHeader == "authorization" { throw ConfigError(node.key, "authorization carries the token, not the nonce") }
        }
        if policy.tokenHeader == policy.nonceHeader { throw ConfigError(node.key, "token_header and nonce_header must differ") }
        if let node = fields["mode"] {
            guard let mode = ForwardAuthPolicy.Mode(rawValue: try node.string()) else { throw ConfigError(node.key, "must be enforce or shadow") }
            policy.mode = mode
        }
        if let block = fields["claim_headers"] {
            var seen: Set<String> = []
            for (name, sourceNode) in try block.entries() {
                let sourceText = try sourceNode.string()
                guard let source = ClaimSource(parsing: sourceText) else {
                    throw ConfigError(
                        sourceNode.key,
                        "\"\(sourceText.excerpt(bytes: 64))\" is not a claim source (user_id, subject, tenant_id, email, issuer, audience, expires_at, claims.NAME)"
                    )
                }
                let header: ClaimHeader
                switch ClaimHeader.make(name: name, source: source) {
                case .success(let made): header = made
                case .failure(let error): throw ConfigError(sourceNode.key, error.message)
                }
                guard seen.insert(header.name).inserted else { throw ConfigError(sourceNode.key, "header \(header.name) is listed twice") }
                guard header.name != policy.tokenHeader, header.name != policy.nonceHeader else {
                    throw ConfigError(sourceNode.key, "\(header.name) is the header the token or nonce comes in")
                }
                policy.claimHeaders.append(header)
            }
        }
        return policy
    }
}

/// A YAML node with its dotted key path, for typed reads that fail with the key's name.
struct ConfigNode {
    let node: Node
    let key: String

    init(_ node: Node, key: String) {
        self.node = node
        self.key = key
    }

    private func child(_ name: String) -> String { key.isEmpty ? name : "\(key).\(name)" }

    /// The mapping's entries; with `allowed`, any other key is an error.
    func mapping(allowed: Set<String>?) throws(ConfigError) -> [String: ConfigNode] {
        var result: [String: ConfigNode] = [:]
        for (name, value) in try entries() {
            if let allowed, !allowed.contains(name) { throw ConfigError(child(name), "unknown key") }
            result[name] = value
        }
        return result
    }

    /// Mapping entries in file order.
    func entries() throws(ConfigError) -> [(String, ConfigNode)] {
        guard let mapping = node.mapping else { throw ConfigError(key, "must be a mapping") }
        var result: [(String, ConfigNode)] = []
        for (keyNode, value) in mapping {
            guard case .scalar = keyNode, let name = keyNode.string else { throw ConfigError(key, "keys must be strings") }
            result.append((name, ConfigNode(value, key: child(name))))
        }
        return result
    }

    func string() throws(ConfigError) -> String {
        guard case .scalar(let scalar) = node else { throw ConfigError(key, "must be a string") }
        return scalar.string
    }

    /// True for a YAML null (`null`, `~` or an empty value).
    var isNull: Bool { node.null != nil }

    func int(in range: ClosedRange<Int>) throws(ConfigError) -> Int {
        guard case .scalar = node, let value = node.int else { throw ConfigError(key, "must be an integer") }
        guard range.contains(value) else { throw ConfigError(key, "must be between \(range.lowerBound) and \(range.upperBound)") }
        return value
    }

    func bool() throws(ConfigError) -> Bool {
        guard case .scalar = node, let value = node.bool else { throw ConfigError(key, "must be true or false") }
        return value
    }

    func stringList() throws(ConfigError) -> [String] {
        guard case .sequence(let sequence) = node else { throw ConfigError(key, "must be a list") }
        var result: [String] = []
        for element in sequence {
            guard case .scalar(let scalar) = element else { throw ConfigError(key, "must be a list of strings") }
            result.append(scalar.string)
        }
        return result
    }

    /// An absolute http(s) URL. Plain http is accepted only for loopback hosts (tests, the dev IdP).
    /// An absolute https URL. Plain http only with `dev_idp: true`, and then only to a loopback address.
    func url(allowLoopbackHTTP: Bool) throws(ConfigError) -> String {
        let value = try string()
        guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw ConfigError(key, "must be an ASCII URL (IDNs punycoded)") }
        // A Microsoft issuer template carries {tenantid}; check the URL with a tenant in its place.
        let checked = value.replacingOccurrences(of: "{tenantid}", with: "00000000-0000-0000-0000-000000000000")
        guard let components = URLComponents(string: checked), let scheme = components.scheme?.lowercased(), let host = components.host,
            !host.isEmpty, components.user == nil, components.password == nil
        else { throw ConfigError(key, "must be an absolute https URL") }
        switch scheme {
        case "https": return value
        case "http" where allowLoopbackHTTP && OutboundURL.loopbackHosts.contains(host.lowercased()): return value
        case "http" where OutboundURL.loopbackHosts.contains(host.lowercased()):
            throw ConfigError(key, "plain http is allowed only for a local development IdP: set dev_idp: true on this provider")
        default: throw ConfigError(key, "must use https")
        }
    }
}

extension Configuration {
    /// The service's configuration with no config file: Apple, Facebook Limited Login and Microsoft with their
    /// real JWKS, audiences from `TOKENGUARD_APPLE_AUDIENCES`, `TOKENGUARD_FACEBOOK_LIMITED_AUDIENCES` and
    /// `TOKENGUARD_MICROSOFT_AUDIENCES` (comma-separated) and tenants from `TOKENGUARD_MICROSOFT_TENANTS`
    /// (without it every Microsoft token is `tenant_not_allowed`, saying what to set). A provider with no audiences answers every token `invalid_audience`, saying what to set.
    package static func builtInDefaults(environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> Configuration {
        func list(_ name: String) -> [String] {
            (environment[name] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        var configuration = Configuration()
        var tenants = TenantRule.unset(hint: "set TOKENGUARD_MICROSOFT_TENANTS to your tenant GUIDs (or organizations, consumers, *)")
        let tenantList = list("TOKENGUARD_MICROSOFT_TENANTS")
        if !tenantList.isEmpty {
            guard let rule = TenantRule.parse(tenantList) else {
                throw ConfigError("TOKENGUARD_MICROSOFT_TENANTS", "must be *, organizations, consumers or tenant GUIDs")
            }
            tenants = rule
        }
        configuration.providers = [
            ProviderConfiguration(
                name: "apple", kind: .apple,
                settings: .jws(.apple(audiences: list("TOKENGUARD_APPLE_AUDIENCES")), .jwksURL(defaultJWKSURL(.apple)!))),
            ProviderConfiguration(
                name: "facebook_limited", kind: .facebookLimited,
                settings: .jws(
                    .facebookLimited(audiences: list("TOKENGUARD_FACEBOOK_LIMITED_AUDIENCES")),
                    .jwksURL(defaultJWKSURL(.facebookLimited)!))),
            ProviderConfiguration(
                name: "microsoft", kind: .microsoft,
                settings: .jws(
                    .microsoft(audiences: list("TOKENGUARD_MICROSOFT_AUDIENCES"), tenants: tenants),
                    .jwksURL(defaultJWKSURL(.microsoft)!))),
        ]
        try configuration.applyEnvironmentOverrides(environment)
        return configuration
    }

    /// `TOKENGUARD_LISTEN` and `TOKENGUARD_KEY_ARCHIVE` override the file (or the built-in defaults).
    mutating func applyEnvironmentOverrides(_ environment: [String: String]) throws(ConfigError) {
        if let listen = environment["TOKENGUARD_LISTEN"] { self.listen = try Self.validatedListen(listen, key: "TOKENGUARD_LISTEN") }
        if let archive = environment["TOKENGUARD_KEY_ARCHIVE"] { keyArchive = archive }
    }

    /// Where each built-in kind's keys live (contract: Providers).
    static func defaultJWKSURL(_ kind: ProviderKind) -> String? {
        switch kind {
        case .apple: "https://appleid.apple.com/auth/keys"
        case .facebookLimited: "https://limited.facebook.com/.well-known/oauth/openid/jwks/"
        case .microsoft: "https://login.microsoftonline.com/common/discovery/v2.0/keys"
        case .facebook: defaultJWKSURL(.facebookLimited)
        case .oidc, .github, .facebookClassic, .microsoftExternalID: nil
        }
    }

    /// The SQLite revocation store's file: `revocations.path`, else `tokenguard-revocations.sqlite` beside the key
    /// archive; nil when there is neither (the demo: revocations then live in memory).
    package var revocationsPath: String? {
        guard case .sqlite(let path) = revocations.store else { return nil }
        if let path { return path }
        guard !keyArchive.isEmpty else { return nil }
        // The archive's directory, by its last "/" (a path ending in "/" names a directory itself).
        let directory: Substring
        if let slash = keyArchive.lastIndex(of: "/") {
            directory = keyArchive[..<slash]
            if directory.isEmpty { return "/tokenguard-revocations.sqlite" }
        } else {
            directory = "."
        }
        return directory + "/tokenguard-revocations.sqlite"
    }

    /// Host and port of `listen`.
    package var listenHostAndPort: (host: String, port: Int) {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]) else { return ("127.0.0.1", 8080) }
        var host = String(listen[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }
}

extension Configuration {
    /// Pairs of JWS providers that accept the same tokens (an issuer and an audience in common). Replay keys are
    /// per configured provider, so one sign-in could be accepted once by each: `serve` warns about every pair.
    package var providersAcceptingTheSameTokens: [(String, String)] {
        let jws = providers.compactMap { provider in provider.policy.map { (provider.name, $0) } }
        var pairs: [(String, String)] = []
        for (index, (name, policy)) in jws.enumerated() {
            for (otherName, other) in jws[(index + 1)...] {
                let sameIssuer: Bool
                switch (policy.issuers, other.issuers) {
                case (.exact(let left), .exact(let right)): sameIssuer = left.contains { right.containsBytes($0) }
                case (.tenantTemplate(let left), .tenantTemplate(let right)): sameIssuer = left.sameBytes(as: right)
                default: sameIssuer = false
                }
                if sameIssuer && policy.audiences.contains(where: { other.audiences.containsBytes($0) }) { pairs.append((name, otherName)) }
            }
        }
        return pairs
    }
}
