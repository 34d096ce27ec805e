#!/usr/bin/env python3
"""Regenerates examples/: a pinned JWKS, a config that trusts it, and a sample NDJSON token log.

The tokens carry their own "at" (a time inside their lifetime), so `tokenguard batch` gives the same verdicts
on any day. The private keys are thrown away: nothing here can mint more tokens. Needs python3-cryptography.
"""
import base64, hashlib, json, os
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
enc = lambda obj: b64(json.dumps(obj, separators=(",", ":")).encode())
def n2b(n, size=None):
    size = size or (n.bit_length() + 7) // 8
    return n.to_bytes(size, "big")

apple_key = rsa.generate_private_key(65537, 2048)
ms_key = rsa.generate_private_key(65537, 2048)
fb_key = rsa.generate_private_key(65537, 2048)
corp_key = ec.generate_private_key(ec.SECP256R1())

def rsa_jwk(key, kid, extra=None):
    pub = key.public_key().public_numbers()
    jwk = {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(n2b(pub.n)), "e": b64(n2b(pub.e))}
    jwk.update(extra or {})
    return jwk

def sign_rs256(key, header, claims):
    signing_input = enc(header) + "." + enc(claims)
    return signing_input + "." + b64(key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()))

def sign_es256(key, header, claims):
    signing_input = enc(header) + "." + enc(claims)
    r, s = utils.decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return signing_input + "." + b64(n2b(r, 32) + n2b(s, 32))

def write_jwks(name, keys):
    with open(os.path.join(out, name), "w") as f:
        json.dump({"keys": keys}, f, indent=1)
        f.write("\n")

pub = corp_key.public_key().public_numbers()
write_jwks("apple-jwks.json", [rsa_jwk(apple_key, "SAMPLEAPPLE1")])
write_jwks("microsoft-jwks.json", [rsa_jwk(ms_key, "sampleMsKey1", {"issuer": "https://login.microsoftonline.com/{tenantid}/v2.0"})])
write_jwks("facebook-jwks.json", [rsa_jwk(fb_key, "0123456789abcdef0123456789abcdef01234567")])
write_jwks("corp-jwks.json", [{"kty": "EC", "kid": "corp-1", "use": "sig", "alg": "ES256", "crv": "P-256",
                               "x": b64(n2b(pub.x, 32)), "y": b64(n2b(pub.y, 32))}])

T = 1767222000  # 2026-01-01T00:00:00Z
nonce = "d8f1f8c0-sample-raw-nonce"
nonce_hash = hashlib.sha256(nonce.encode()).hexdigest()
tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
apple_claims = {"iss": "https://appleid.apple.com", "aud": "com.example.app", "exp": T + 86400, "iat": T,
                "sub": "001234.0123456789abcdef0123456789abcdef.1234", "nonce": nonce_hash,
                "email": "x1y2z3@privaterelay.appleid.com", "email_verified": "true", "is_private_email": "true",
                "auth_time": T, "nonce_supported": True}
apple = sign_rs256(apple_key, {"kid": "SAMPLEAPPLE1", "alg": "RS256"}, apple_claims)
ms = sign_rs256(ms_key, {"typ": "JWT", "alg": "RS256", "kid": "sampleMsKey1"},
                {"aud": "6731de76-14a6-49ae-97bc-6eba6914391e", "iss": f"https://login.microsoftonline.com/{tenant}/v2.0",
                 "iat": T, "nbf": T, "exp": T + 3900, "name": "Sample User", "nonce": nonce,
                 "oid": "00000000-0000-0000-66f3-3332eca7ea81", "preferred_username": "user@contoso.example",
                 "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", "tid": tenant, "ver": "2.0"})
fb = sign_rs256(fb_key, {"alg": "RS256", "typ": "JWT", "kid": "0123456789abcdef0123456789abcdef01234567"},
                {"iss": "https://www.facebook.com", "aud": "1234567890", "sub": "3944046265836837", "iat": T,
                 "exp": T + 3600, "jti": "sample.jti", "nonce": nonce_hash, "name": "Sample User"})
corp = sign_es256(corp_key, {"alg": "ES256", "kid": "corp-1"},
                  {"iss": "https://idp.corp.example", "aud": "api", "sub": "svc-42", "iat": T, "exp": T + 600})
wrong_aud = sign_rs256(apple_key, {"kid": "SAMPLEAPPLE1", "alg": "RS256"}, dict(apple_claims, aud="com.other.app"))
unknown_kid = sign_rs256(apple_key, {"kid": "ROTATED0", "alg": "RS256"}, apple_claims)
h, p, s = apple.split(".")
forged_payload = enc(dict(apple_claims, sub="001234.attacker"))
none_token = enc({"alg": "none"}) + "." + enc(apple_claims) + "."

lines = [
    {"id": 1, "provider": "apple", "token": apple, "nonce": nonce, "at": T + 60},
    {"id": 2, "provider": "apple", "token": apple, "nonce": "some-other-nonce", "at": T + 60},
    {"id": 3, "provider": "apple", "token": f"{h}.{forged_payload}.{s}", "nonce": nonce, "at": T + 60},
    {"id": 4, "provider": "apple", "token": apple, "nonce": nonce, "at": T + 86400 + 3600},
    {"id": 5, "provider": "apple", "token": wrong_aud, "nonce": nonce, "at": T + 60},
    {"id": 6, "provider": "apple", "token": unknown_kid, "nonce": nonce, "at": T + 60},
    {"id": 7, "provider": "apple", "token": none_token, "nonce": nonce, "at": T + 60},
    {"id": 8, "provider": "microsoft", "token": ms, "nonce": nonce, "at": T + 60},
    {"id": 9, "provider": "facebook_limited", "token": fb, "nonce": nonce, "at": T + 60},
    {"id": 10, "provider": "corp", "token": corp, "at": T + 60},
    {"id": 11, "provider": "github", "token": "gho_x", "at": T + 60},
]
with open(os.path.join(out, "sample-tokens.ndjson"), "w") as f:
    for line in lines:
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
    f.write('{"id": 12, "provider": "apple", "token": 42}\n')
    f.write("this line is not JSON\n")
print("wrote", out)
