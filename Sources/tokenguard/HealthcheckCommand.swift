import ArgumentParser
import TokenGuardCore
import TokenGuardFetch
import TokenGuardService

/// For container health checks on images without curl: GETs a loopback URL, exits 0 on 200.
struct HealthcheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "healthcheck", abstract: "GET a loopback URL (default /healthz) and exit 0 on 200, 1 otherwise.")

    @Option(name: .long, help: "The URL to check (http only to loopback).")
    var url = "http://127.0.0.1:8080/healthz"

    func run() async throws {
        var configuration = CurlHTTPClient.Configuration()
        configuration.totalTimeoutMilliseconds = 2_000
        configuration.threads = 1
        let client = CurlHTTPClient(configuration: configuration)
        let target = url
        let status = (try? await client.send(HTTPRequest(url: target, maximumResponseBytes: 65_536)))?.status ?? 0
        // The exit status is the answer (Docker's HEALTHCHECK reserves 2): the line is written if it can be.
        Stdout.write((status == 200 ? "ok" : "unhealthy (\(status))") + "\n")
        if status != 200 { throw ExitCodes.rejected }
    }
}
