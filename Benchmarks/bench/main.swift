import TokenGuardCrypto
import TokenGuardCore
do {
    let k = try SigningKey(generating: .rsa(bits: 2048))
    let (n, e) = try k.rsaComponents()
    print(n.count, e)
    _ = try PublicKey(rsaModulus: n, exponent: e)
    print("ok rsa")
} catch { print("ERR", error) }
