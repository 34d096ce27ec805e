import Foundation
import Testing
import TokenGuardCore
import TokenGuardService
import TokenGuardTestSupport

/// `http.ca_file`: an IdP on HTTPS with a private CA the test makes, trusted only when the config names the CA.
@Suite(.serialized)
struct PrivateCAE2ETests {
    func run(_ executable: String, _ arguments: [String], in directory: String) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        await process.exited()
        guard process.terminationStatus == 0 else { throw RunnerError("\(executable) \(arguments.joined(separator: " ")) failed") }
    }

    @Test("keys from an HTTPS IdP with a private CA: trusted with http.ca_file, refused (503) without it, a non-PEM file is a config error")
    func privateCA() async throws {
        let workspace = try TempWorkspace()
        let dir = workspace.url.path
        let openssl = "/usr/bin/openssl"
        try await run(
            openssl,
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
                "/CN=tokenguard test CA",
            ], in: dir)
        try await run(openssl, ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "idp.key", "-out", "idp.csr", "-subj", "/CN=127.0.0.1"], in: dir)
        _ = try workspace.write("san.ext", "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
        try await run(
            openssl,
            [
                "x509", "-req", "-in", "idp.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "idp.pem", "-days", "2", "-extfile",
                "san.ext",
            ],
            in: dir)
        let key = try SharedTestKeys.rsa()
        try workspace.write("jwks.json", try SharedTestKeys.jwks([key]))
        let port = try FreeLoopbackPort.pick()
        // openssl's own TLS server serves the workspace's files (-WWW): an HTTPS IdP with the test's certificate.
        let idp = Process()
        idp.executableURL = URL(fileURLWithPath: openssl)
        idp.arguments = ["s_server", "-quiet", "-accept", "127.0.0.1:\(port)", "-cert", "idp.pem", "-key", "idp.key", "-WWW"]
        idp.currentDirectoryURL = workspace.url
        idp.standardInput = FileHandle.nullDevice
        idp.standardOutput = FileHandle.nullDevice
        idp.standardError = FileHandle.nullDevice
        try idp.run()
        defer {
            kill(idp.processIdentifier, SIGKILL)
            idp.waitUntilExit()
        }
        for _ in 0..<100 {
            if let fd = RawHTTP.connectLoopback(port: port) {
                close(fd)
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        let provider =
            "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_url: \"https://127.0.0.1:\(port)/jwks.json\" }\n"
        // Each server its own key archive: the untrusting one must not find keys the trusting one archived.
        let trusted = try workspace.write("trusted.yaml", "key_archive: trusted.sqlite\nhttp: { ca_file: ca.pem }\n" + provider)
        let untrusted = try workspace.write("untrusted.yaml", "key_archive: untrusted.sqlite\n" + provider)
        let token = try key.sign(ProviderTokens.apple(now: Int64(Date().timeIntervalSince1970), rawNonce: "ca-nonce"))
        let body = "{\"provider\":\"apple\",\"token\":\"\(token)\",\"nonce\":\"ca-nonce\"}"

        let server = try await ServerProcess(arguments: ["--config", trusted], workspace: workspace)
        try await server.waitUntilReady()
        let answer = try await server.post("/v1/verify", body)
        #expect(answer.status == 200, "\(String(decoding: answer.body, as: UTF8.self)) \(server.log().suffix(600))")
        server.stop()
        let refusing = try await ServerProcess(arguments: ["--config", untrusted], workspace: workspace)
        defer { refusing.stop() }
        let refused = try await refusing.post("/v1/verify", body)
        #expect(refused.status == 503)
        #expect(String(decoding: refused.body, as: UTF8.self).contains("keys_unavailable"))

        let notPEM = try workspace.write("bad.yaml", "http: { ca_file: jwks.json }\n" + provider)
        let bad = try await BinaryRunner.run(["verify", "--config", notPEM, "--provider", "apple", "--token", token, "--nonce", "ca-nonce"])
        #expect(bad.status == 2 && bad.stderr.contains("http.ca_file"))
    }
}
