import Dispatch
import Foundation
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardTestSupport

struct Measurement {
    let section: String
    let name: String
    let perSecond: Double
    var ratioTo: (String, Double)? = nil
}

struct Report {
    var measurements: [Measurement] = []
    var targets: [(String, Double, Double, Bool)] = []  // key, value, target, met
    var notes: [String] = []

    func table() -> String {
        var lines = ["tokenguard bench (single thread)", String(repeating: "-", count: 78)]
        for m in measurements {
            let ratio = m.ratioTo.map { String(format: "  %.2fx %@", $0.1, $0.0) } ?? ""
            lines.append(String(format: "%-10@ %-34@ %12.0f /s", m.section, m.name, m.perSecond) + ratio)
        }
        lines.append(String(repeating: "-", count: 78))
        for (key, value, target, met) in targets {
            lines.append(String(format: "target %-32@ %8.2f (target %.2f) %@", key, value, target, met ? "met" : "MISSED"))
        }
        lines += notes
        return lines.joined(separator: "\n")
    }

    func json() -> String {
        var root = JSONObject()
        root.set("measurements", .array(measurements.map { m in
            var object = JSONObject([("section", .string(m.section)), ("name", .string(m.name)), ("per_second", .number(m.perSecond))])
            if let (base, ratio) = m.ratioTo { object.set("ratio", .number(ratio)); object.set("ratio_to", .string(base)) }
            return .object(object)
        }))
        var targetObject = JSONObject()
        for (key, value, target, met) in targets {
            targetObject.set(key, .object(JSONObject([("value", .number(value)), ("target", .number(target)), ("met", .bool(met))])))
        }
        root.set("targets", .object(targetObject))
        return JSONWriter.string(.object(root))
    }
}

struct Bench {
    let secondsPerCase: Double

    /// Runs `body` repeatedly for about `secondsPerCase` after a short warm-up; returns calls per second.
    func rate(_ body: () -> Bool) -> Double {
        for _ in 0..<50 { _ = body() }
        var calls = 0
        let start = DispatchTime.now().uptimeNanoseconds
        let budget = UInt64(secondsPerCase * 1e9)
        var elapsed: UInt64 = 0
        while elapsed < budget {
            for _ in 0..<64 { if !body() { calls = -1_000_000_000 } }
            calls += 64
            elapsed = DispatchTime.now().uptimeNanoseconds - start
        }
        precondition(calls > 0, "a benchmarked call failed")
        return Double(calls) / (Double(elapsed) / 1e9)
    }

    func run() throws -> Report {
        var report = Report()
        let fixtures = try Fixture.all()
        var limits: [String: Double] = [:]
        var ours: [String: Double] = [:]
        for fixture in fixtures {
            let raw = try RawOpenSSLVerifier(fixture: fixture)
            let limit = rate { raw.verify() }
            limits[fixture.name] = limit
            report.measurements.append(Measurement(section: "limit", name: "OpenSSL \(fixture.name) (pre-hashed)", perSecond: limit))
            let verifier = fixture.verifier
            let full = rate {
                if case .success = verifier.verify(token: fixture.token, nonce: fixture.nonce, at: fixture.now) { return true }
                return false
            }
            ours[fixture.name] = full
            report.measurements.append(
                Measurement(section: "tokenguard", name: "full verify \(fixture.name) (\(fixture.token.utf8.count) B)", perSecond: full, ratioTo: ("OpenSSL", full / limit)))
            // Everything but the signature: the same token against a key set where the signature check is the last step.
            let overheadNs = 1e9 / full - 1e9 / limit
            report.notes.append(String(format: "%@: tokenguard spends %.2f µs per token beyond OpenSSL's verify", fixture.name, overheadNs / 1000))
        }
        for fixture in fixtures where fixture.name == "RS256" || fixture.name == "ES256" {
            let reference = LibJWTReference(publicKeyPEM: try fixture.key.signingKey.publicKeyPEM())
            let libjwt = rate { reference.accepts(fixture.token) }
            report.measurements.append(Measurement(section: "peer", name: "libjwt jwt_decode \(fixture.name)", perSecond: libjwt))
            if fixture.name == "RS256", let our = ours["RS256"] {
                report.targets.append(("rs256_vs_libjwt", our / libjwt, 5, our / libjwt >= 5))
            }
        }
        let rsa = fixtures[0]
        let malformed = ["", "a.b", "not a token at all", String(rsa.token.dropLast(1)) + "!", "e30.e30.e30.e30"]
        var index = 0
        let rejections = rate {
            index = (index + 1) % malformed.count
            if case .failure = rsa.verifier.verify(token: malformed[index], nonce: rsa.nonce, at: rsa.now) { return true }
            return false
        }
        report.measurements.append(Measurement(section: "reject", name: "malformed tokens", perSecond: rejections))
        let unknownKid = try rsa.key.sign(ProviderTokens.apple(now: rsa.now, rawNonce: rsa.nonce), keyID: "not-published")
        let unknown = rate {
            if case .failure = rsa.verifier.verify(token: unknownKid, nonce: rsa.nonce, at: rsa.now) { return true }
            return false
        }
        report.measurements.append(Measurement(section: "reject", name: "unknown kid (no fetch)", perSecond: unknown))
        let parts = segments(rsa.token)
        var badSignature = Array(parts[2].utf8)
        badSignature[10] = badSignature[10] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let forged = "\(parts[0]).\(parts[1]).\(String(decoding: badSignature, as: UTF8.self))"
        let bad = rate {
            if case .failure = rsa.verifier.verify(token: forged, nonce: rsa.nonce, at: rsa.now) { return true }
            return false
        }
        report.measurements.append(Measurement(section: "reject", name: "bad signature RS256", perSecond: bad))

        for (name, key, target) in [("RS256", "rs256_vs_openssl", 0.85), ("PS256", "ps256_vs_openssl", 0.85), ("ES256", "es256_vs_openssl", 0.9), ("EdDSA", "eddsa_vs_openssl", 0.9)] {
            if let our = ours[name], let limit = limits[name] { report.targets.append((key, our / limit, target, our / limit >= target)) }
        }
        report.targets.append(("malformed_rejections_per_core", rejections, 2_000_000, rejections >= 2_000_000))
        return report
    }
}
