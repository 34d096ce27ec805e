#ifndef TOKENGUARD_COPENSSL_SHIM_H
#define TOKENGUARD_COPENSSL_SHIM_H
// OpenSSL 3 headers tokenguard uses. Only macros and variadics that Swift cannot
// import get a typed `static inline` wrapper here; everything else is called directly.
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>

/// `EVP_PKEY_PUBLIC_KEY` is a compound macro that Swift does not import.
static inline int tg_evp_pkey_public_key_selection(void) { return EVP_PKEY_PUBLIC_KEY; }

/// `BIO_get_mem_data` is a macro over `BIO_ctrl`.
static inline long tg_bio_get_mem_data(BIO *bio, char **out) { return BIO_get_mem_data(bio, out); }

/// `RSA_PSS_SALTLEN_DIGEST` (-1): the salt length equals the digest length, as RFC 7518 §3.5 requires.
static inline int tg_rsa_pss_saltlen_digest(void) { return RSA_PSS_SALTLEN_DIGEST; }

/// OSSL_PARAM_BLD keeps the *name* pointer of each pushed parameter until it builds, so names must have static
/// storage. Swift turns a string argument into a temporary C string, which would dangle; these return the
/// header's own string literals instead.
static inline const char *tg_param_rsa_n(void) { return OSSL_PKEY_PARAM_RSA_N; }
static inline const char *tg_param_rsa_e(void) { return OSSL_PKEY_PARAM_RSA_E; }
static inline const char *tg_param_group_name(void) { return OSSL_PKEY_PARAM_GROUP_NAME; }
static inline const char *tg_param_pub_key(void) { return OSSL_PKEY_PARAM_PUB_KEY; }

/// SHA-256 of `count` bytes into `out` (32 bytes) with OpenSSL's SHA-256 on a context on the stack: 1 on success.
/// For the digests a request makes besides its signature check (the nonce's, the replay keys'): `EVP_Digest` allocates
/// and frees two contexts and dispatches through the provider per call, which for a nonce costs more than the hash.
/// Signatures are still verified through EVP (the provider the process is configured with). `SHA256_Final` cleanses
/// the context.
static inline int tg_sha256(const unsigned char *data, size_t count, unsigned char *out) {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    SHA256_CTX context;
    int ok = SHA256_Init(&context) == 1 && SHA256_Update(&context, data, count) == 1 && SHA256_Final(out, &context) == 1;
#pragma clang diagnostic pop
    return ok;
}

// OpenSSL frees its global state from an atexit handler by default; a thread still verifying or fetching at that
// moment would then use freed memory. tokenguard keeps the state until the process is gone.
static inline int tg_openssl_init_no_atexit(void) { return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL); }

#endif
