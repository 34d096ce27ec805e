import COpenSSL
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardTestSupport

/// The limit: OpenSSL's own verify with a pre-parsed key and a pre-computed digest (single thread).
///
/// For RSA and ECDSA the digest of the signing input is computed once and `EVP_PKEY_verify` runs on it with a
/// context initialised once. Ed25519 has no pre-hash form, so its limit is one-shot `EVP_DigestVerify` on a
/// context that is reinitialised per call, the least any Ed25519 verification can do.
final class RawOpenSSLVerifier {
    private let pkey: OpaquePointer
    private let ctx: OpaquePointer?
    private let signature: [UInt8]
    private let digest: [UInt8]
    private let message: [UInt8]
    private let isEd25519: Bool
    /// For ``hashSigningInput()``: SHA-256 fetched once, on one reused context, as tokenguard hashes it.
    private let sha256: OpaquePointer?
    private let hashContext: OpaquePointer?
    /// The signing input's length in bytes.
    var signingInputCount: Int { message.count }

    init(fixture: Fixture) throws {
        let pem = Array(try fixture.key.signingKey.publicKeyPEM().utf8)
        // BIO_new_mem_buf keeps the pointer: the BIO is made, read and freed while the buffer is pinned.
        let parsed: OpaquePointer? = pem.withUnsafeBufferPointer { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let pkey = parsed else { throw RunnerError("PEM_read_bio_PUBKEY") }
        self.pkey = pkey
        let parts = segments(fixture.token)
        message = Array("\(parts[0]).\(parts[1])".utf8)
        let raw = Base64URL.decode(parts[2]) ?? []
        isEd25519 = fixture.name == "EdDSA"
        if fixture.name == "ES256" {
            func derInt(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
                var value = Array(bytes.drop(while: { $0 == 0 }))
                if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
                return [0x02, UInt8(value.count)] + value
            }
            let body = derInt(raw[0..<32]) + derInt(raw[32..<64])
            signature = [0x30, UInt8(body.count)] + body
        } else {
            signature = raw
        }
        digest = SHA256.hash(message)
        if isEd25519 {
            ctx = nil
        } else {
            guard let ctx = EVP_PKEY_CTX_new(pkey, nil), EVP_PKEY_verify_init(ctx) == 1,
                EVP_PKEY_CTX_set_signature_md(ctx, EVP_sha256()) == 1
            else { throw RunnerError("EVP_PKEY_verify_init") }
            if fixture.name == "PS256" {
                _ = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PSS_PADDING)
                _ = EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, tg_rsa_pss_saltlen_digest())
            }
            self.ctx = ctx
        }
        sha256 = EVP_MD_fetch(nil, "SHA256", nil)
        hashContext = EVP_MD_CTX_new()
        guard verify() else { throw RunnerError("raw OpenSSL verify failed for \(fixture.name)") }
        guard hashSigningInput() else { throw RunnerError("SHA-256 of the signing input failed for \(fixture.name)") }
    }

    deinit {
        if let hashContext { EVP_MD_CTX_free(hashContext) }
        if let sha256 { EVP_MD_free(sha256) }
        if let ctx { EVP_PKEY_CTX_free(ctx) }
        EVP_PKEY_free(pkey)
    }

    /// SHA-256 of the signing input through EVP, the part of a JWS check the limit gets precomputed (RS256, PS256 and
    /// ES256 hash it before the signature check; for Ed25519 the limit itself hashes, so this is not part of its
    /// overhead).
    func hashSigningInput() -> Bool {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digest in
            var size: UInt32 = 0
            return EVP_DigestInit_ex2(hashContext, sha256, nil) == 1 && EVP_DigestUpdate(hashContext, message, message.count) == 1
                && EVP_DigestFinal_ex(hashContext, digest.baseAddress, &size) == 1 && size == 32
        }
    }

    func verify() -> Bool {
        if isEd25519 {
            guard let md = EVP_MD_CTX_new() else { return false }
            defer { EVP_MD_CTX_free(md) }
            guard EVP_DigestVerifyInit(md, nil, nil, nil, pkey) == 1 else { return false }
            return EVP_DigestVerify(md, signature, signature.count, message, message.count) == 1
        }
        return EVP_PKEY_verify(ctx, signature, signature.count, digest, digest.count) == 1
    }
}
