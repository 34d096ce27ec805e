import CJWT

/// libjwt 1.10 as an independent reference verifier (tests and benchmark only).
///
/// `jwt_decode` with a PEM package key checks the structure and the signature with the algorithm the header
/// names; it checks no claims. It supports RS256/384/512 and ES256/384/512, not PS* or EdDSA.
package struct LibJWTReference: Sendable {
    private let pem: [UInt8]

    package init(publicKeyPEM: String) { pem = Array(publicKeyPEM.utf8) }

    /// True when libjwt accepts the token's signature.
    package func accepts(_ token: String) -> Bool {
        var jwt: OpaquePointer? = nil
        let status = pem.withUnsafeBufferPointer { key in
            jwt_decode(&jwt, token, key.baseAddress, Int32(key.count))
        }
        if let jwt { jwt_free(jwt) }
        return status == 0
    }
}
