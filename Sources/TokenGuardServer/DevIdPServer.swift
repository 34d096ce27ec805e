import Hummingbird
import Logging
import ServiceLifecycle
import TokenGuardCore
import TokenGuardService

/// The developer IdP over HTTP, on loopback only (the role Firebase's Auth emulator plays):
/// `GET /jwks`, `GET /.well-known/openid-configuration`, and `GET /mint?provider=apple&nonce=RAW[&audience=…]`.
package enum DevIdPServer {
    package struct NotLoopback: Error, CustomStringConvertible {
        package let host: String
        package var description: String { "the dev IdP listens only on loopback (127.0.0.1, ::1, localhost), not \(host)" }
    }

    package static func checkLoopback(_ host: String) throws {
        guard OutboundURL.loopbackHosts.contains(host.lowercased()) else { throw NotLoopback(host: host) }
    }

    package static func build(
        minter: DevTokenMinter, host: String, port: Int, logger: Logger, onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol & Service {
        try checkLoopback(host)
        let router = Router(context: TokenGuardRequestContext.self)
        let jwks = try minter.jwks()
        router.get("/jwks") { _, _ in
            var headers = HTTPFields()
            headers[.cacheControl] = "public, max-age=300"
            headers[.contentType] = "application/json"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: jwks)))
        }
        router.get("/.well-known/openid-configuration") { request, _ in
            let base = "http://\(request.head.authority ?? "\(host):\(port)")"
            return JSONResponse.make(
                .object(
                    JSONObject([
                        ("issuer", .string(base)), ("jwks_uri", .string(base + "/jwks")),
                        ("id_token_signing_alg_values_supported", .array([.string("RS256")])),
                    ])))
        }
        router.get("/mint") { request, _ in
            let query = request.uri.queryParameters
            guard let kindName = query["provider"].map(String.init), let kind = ProviderKind(rawValue: kindName),
                [.apple, .facebookLimited, .microsoft].contains(kind)
            else { throw APIError.invalidRequest("provider must be apple, facebook_limited or microsoft") }
            let token = try minter.mint(
                kind: kind, audience: query["audience"].map(String.init), subject: query["subject"].map(String.init),
                rawNonce: query["nonce"].map(String.init))
            return JSONResponse.make(.object(JSONObject([("token", .string(token)), ("provider", .string(kindName))])))
        }
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: "tokenguard-dev-idp"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
            eventLoopGroupProvider: .shared(ServerEventLoops.group), logger: logger)
    }
}
