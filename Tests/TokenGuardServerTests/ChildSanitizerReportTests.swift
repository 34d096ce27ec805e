import Foundation
import Testing
import TokenGuardTestSupport

/// A sanitizer's report in a server the tests started reaches the sanitizer run's verdict (scripts/sanitize.sh fails
/// when the reports folder holds a file), whether or not a request to that server failed.
struct ChildSanitizerReportTests {
    @Test("a stopped child's log with a sanitizer report is kept for the run's verdict; a clean log is not")
    func reportsAreKept() throws {
        let workspace = try TempWorkspace()
        let folder = workspace.url.appendingPathComponent("reports").path
        let clean = try workspace.write("clean.log", "listening on 127.0.0.1:8080\nshutting down\n")
        BinaryRunner.keepSanitizerReport(logPath: clean, child: "clean", folder: folder)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] == [])

        for marker in ["WARNING: ThreadSanitizer: data race (pid=1)", "ERROR: AddressSanitizer: heap-use-after-free"] {
            let log = try workspace.write("server.log", "listening\n==1==\(marker)\n  #0 somewhere\n")
            BinaryRunner.keepSanitizerReport(logPath: log, child: "serve", folder: folder)
        }
        let kept = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(kept.count == 2)
        let texts = try kept.map { try String(contentsOfFile: folder + "/" + $0, encoding: .utf8) }
        #expect(texts.contains { $0.contains("WARNING: ThreadSanitizer") })
        #expect(texts.contains { $0.contains("ERROR: AddressSanitizer") })

        // No folder named (a run outside scripts/sanitize.sh): nothing is written anywhere.
        BinaryRunner.keepSanitizerReport(logPath: clean, child: "clean", folder: nil)
    }
}
