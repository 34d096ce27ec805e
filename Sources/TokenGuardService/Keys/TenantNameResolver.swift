import Foundation
import Logging
import Metrics
import TokenGuardCore
import TokenGuardSync

/// Microsoft tenants configured by domain name (`contoso.onmicrosoft.com`), resolved to tenant GUIDs through
/// `{authority}/{name}/v2.0/.well-known/openid-configuration` (the GUID is in its `issuer`), kept in the key archive
/// and refreshed in the background. While a name cannot be resolved because the authority is unreachable, a token
/// from a tenant outside the resolved set may belong to it: `keys_unavailable`, never a rejection. Once the authority
/// says the name does not exist, such tokens are `tenant_not_allowed`.
package final class TenantNameResolver: TenantDirectory {
    package enum Resolution: Sendable, Equatable {
        case pending
        case resolved(String)
        /// The authority answered that no such tenant exists.
        case notFound
        /// The authority could not be asked (and nothing is archived).
        case unreachable(String)
    }

    package let provider: String
    package let authority: String
    package let names: [String]
    private let fetcher: any HTTPFetching
    private let archive: KeyArchive?
    private let state: Locked<[String: Resolution]>
    private let clock: WallClock
    private let logger = Logger(label: "tokenguard.tenants")

    package init(provider: String, authority: String, names: [String], fetcher: any HTTPFetching, archive: KeyArchive?, clock: WallClock = .system) {
        self.provider = provider
        self.authority = authority
        self.names = names
        self.fetcher = fetcher
        self.archive = archive
        self.clock = clock
        var initial: [String: Resolution] = Dictionary(uniqueKeysWithValues: names.map { ($0, .pending) })
        if let archived = try? archive?.tenants(authority: authority) {
            for name in names { if let tenantID = archived[name] { initial[name] = .resolved(tenantID) } }
        }
        state = Locked(initial)
    }

    package var resolutions: [(name: String, resolution: Resolution)] {
        let current = state.withLock { $0 }
        return names.map { ($0, current[$0] ?? .pending) }
    }

    package func check(tenantID: String) -> VerificationError? {
        let current = state.withLock { $0 }
        if current.values.contains(.resolved(tenantID)) { return nil }
        let unresolved = names.filter {
            switch current[$0] ?? .pending {
            case .pending, .unreachable: true
            case .resolved, .notFound: false
            }
        }
        if !unresolved.isEmpty {
            return VerificationError(
                .keysUnavailable,
                "tenant \(tenantID) may belong to \(unresolved.joined(separator: ", ")), not resolved yet (no usable answer from \(authority))",
                retryAfterSeconds: 5)
        }
        return VerificationError(.tenantNotAllowed, "tenant \(tenantID) is not allowed for \(provider)")
    }

    /// Resolves every name once (concurrently).
    package func refresh() async {
        await withTaskGroup(of: (String, Resolution).self) { group in
            for name in names { group.addTask { (name, await self.resolve(name)) } }
            for await (name, resolution) in group {
                let changed = state.withLock { current -> Bool in
                    // An unreachable authority never forgets an earlier answer.
                    if case .unreachable = resolution, case .resolved = current[name] ?? .pending { return false }
                    defer { current[name] = resolution }
                    return current[name] != resolution
                }
                if changed { logger.notice("tenant name", metadata: ["provider": "\(provider)", "name": "\(name)", "resolution": "\(resolution)"]) }
                if case .resolved(let tenantID) = resolution {
                    try? archive?.recordTenant(authority: authority, name: name, tenantID: tenantID, at: clock.seconds)
                }
            }
        }
    }

    /// Keeps the names resolved: hourly when all are answered, every 30 s while any is not.
    package func runRefreshLoop() async {
        while !Task.isCancelled {
            await refresh()
            let waiting = resolutions.contains {
                if case .resolved = $0.resolution { return false }
                if case .notFound = $0.resolution { return false }
                return true
            }
            try? await Task.sleep(for: .seconds(waiting ? 30 : 3600))
        }
    }

    func resolve(_ name: String) async -> Resolution {
        let url = "\(authority)/\(name)/v2.0/.well-known/openid-configuration"
        let response: HTTPResponse
        do {
            _ = try OutboundURL.validate(url)
            response = try await fetcher.send(HTTPRequest(url: url, maximumResponseBytes: 256 * 1024))
        } catch {
            return .unreachable("\(error)")
        }
        Counter(label: "tokenguard_tenant_name_lookups_total", dimensions: [("provider", provider), ("status", "\(response.status)")]).increment()
        // Entra answers an unknown tenant with 400 and AADSTS90002 in the body. Any other error page (a proxy's 404,
        // a load balancer's 400) is an outage, not an answer about the tenant.
        if response.status == 400 || response.status == 404 {
            if String(decoding: response.body.prefix(64 * 1024), as: UTF8.self).contains("AADSTS90002") { return .notFound }
            return .unreachable("HTTP \(response.status) without Entra's \"tenant not found\" (AADSTS90002)")
        }
        guard response.status == 200, let document = try? JSONParser.parseObject(response.body), let issuer = document["issuer"]?.stringValue
        else { return .unreachable("HTTP \(response.status) without a usable discovery document") }
        // The issuer is {authority}/{tenant GUID}/v2.0; anything else is not an answer about this tenant.
        let prefix = authority + "/"
        let suffix = "/v2.0"
        guard issuer.utf8.starts(with: prefix.utf8), issuer.utf8.count == prefix.utf8.count + 36 + suffix.utf8.count, issuer.hasSuffix(suffix) else {
            return .unreachable("the discovery issuer is not \(authority)/{tenant}/v2.0")
        }
        let tenantID = ASCII.lowercased(String(issuer.dropFirst(prefix.count).prefix(36)))
        guard GUID.isValid(tenantID) else { return .unreachable("the discovery issuer holds no tenant GUID") }
        return .resolved(tenantID)
    }
}
