import Foundation
import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// Contract v2 "Batch ids": an over-long `tokenguard batch` line keeps its id; HTTP batch items may carry one.
struct BatchIDTests {
    /// A config for one Apple provider whose keys are a file in `workspace`; `settings` are top-level lines before it.
    func config(_ workspace: TempWorkspace, settings: String = "") throws -> String {
        let jwks = try workspace.write("jwks.json", try SharedTestKeys.jwks([try SharedTestKeys.rsa()]))
        return try workspace.write(
            "tokenguard.yaml", settings + "providers:\n  apple: { audiences: [\"\(ProviderTokens.appleAudience)\"], jwks_file: \"\(jwks)\" }\n")
    }

    @Test("an over-long batch line gets its id back (from its first 4 KiB) with token_too_large or invalid_request")
    func overlongLinesKeepTheirID() async throws {
        let workspace = try TempWorkspace()
        let config = try config(workspace, settings: "max_token_bytes: 1024\n")
        let huge = String(repeating: "A", count: 20_000)
        let lines = [
            "{\"id\":\"first\",\"provider\":\"apple\",\"token\":\"\(huge)\"}",
            "{\"id\":{\"n\":[1,2,\"x\"]},\"provider\":\"apple\",\"nonce\":\"\(huge)\",\"token\":\"a.b.c\"}",
            "{\"provider\":\"apple\",\"token\":\"\(huge)\",\"id\":7}",
            "{\"id\":3,\"provider\":\"apple\",\"token\":\"a.b.c\"}",
        ]
        let input = try workspace.write("lines.ndjson", lines.joined(separator: "\n") + "\n")
        let run = try await BinaryRunner.run(["batch", "--config", config, input])
        let verdicts = try run.stdout.split(separator: "\n").map { try JSONParser.parseObject(Array($0.utf8)) }
        #expect(verdicts.count == 4)
        #expect(verdicts[0]["id"] == .string("first"))
        #expect(verdicts[0]["error"]?.objectValue?["code"] == .string("token_too_large"))
        #expect(verdicts[1]["id"] == .object(JSONObject([("n", .array([.integer(1), .integer(2), .string("x")]))])))
        #expect(verdicts[1]["error"]?.objectValue?["code"] == .string("invalid_request"))
        #expect(verdicts[2]["id"] == .null, "an id after the first 4 KiB cannot be read")
        #expect(verdicts[2]["error"]?.objectValue?["code"] == .string("token_too_large"))
        #expect(verdicts[3]["id"] == .integer(3))
        #expect(verdicts[3]["error"]?.objectValue?["code"] == .string("malformed_token"))
    }

    @Test("a line that is not JSON (a byte that is not UTF-8) gets its id back when it is one whole object with one id member")
    func idsOfLinesThatAreNotJSON() async throws {
        let workspace = try TempWorkspace()
        let config = try config(workspace)
        let lines: [[UInt8]] = [
            Array("{\"id\":7,\"provider\":\"apple\",\"token\":\"a".utf8) + [0xFF] + Array("b.c.d\"}".utf8),
            Array("{\"provider\":\"ap".utf8) + [0xFF] + Array("ple\",\"token\":\"x.y.z\",\"id\":\"after\"}".utf8),
            Array("{\"id\":\"q".utf8) + [0xFF] + Array("\",\"provider\":\"apple\",\"token\":\"x.y.z\"}".utf8),
            Array("{\"id\":1,\"id\":2,\"provider\":\"apple\",\"token\":\"x".utf8) + [0xFF] + Array("\"}".utf8),
            Array("{\"id\":[1,{\"k\":\"v\"}],\"provider\":\"apple\",\"token\":\"x".utf8) + [0xC3] + Array("\"}".utf8),
            Array("{\"id\":5,\"provider\":\"apple\",\"token\":\"x.y.z\"}".utf8),
            // Red team 51: a second id far beyond the first 4 KiB, ids without a comma between them, an id inside a
            // nested object whose brackets do not pair, and a truncated line: none of them is surely the line's id.
            Array("{\"id\":\"first\",\"pad\":\"\(String(repeating: "x", count: 5000))\",\"id\":\"second\",\"token\":\"".utf8) + [0xFF]
                + Array("\"}".utf8),
            Array("{\"id\":\"a\" \"id\":\"b\",\"token\":\"".utf8) + [0xFF] + Array("\"}".utf8),
            Array("{\"a\":{\"x\":],\"id\":\"inner\"},\"provider\":\"apple\",\"token\":\"".utf8) + [0xFF] + Array("\"}".utf8),
            Array("{\"id\":9,\"provider\":\"apple\",\"token\":\"x.y".utf8),
            Array("{\"id\":10,\"token\":\"x\"} trailing".utf8),
            Array("{\"id\":11,\"provider\":\"apple\",\"token\":\"x.y.z\",}".utf8),
            // Red team 52: brackets or quotes inside a bare value hid a nested id, and a name that does not decode
            // might itself be `id`.
            Array("{\"a\":x[,\"id\":\"fake\",\"b\":]}".utf8),
            Array("{\"provider\":\"apple\",\"token\":\"a.b.c\",\"meta\":0[,\"id\":\"fake\",\"z\":]}".utf8),
            Array("{\"a\":0\",\"id\":\"f\\\"x\"}".utf8),
            Array("{\"i\\d\":\"a\",\"id\":\"b\",\"y\":1}".utf8),
            Array("{\"i".utf8) + [0xC1, 0xA4] + Array("\":\"a\",\"id\":\"b\"}".utf8),
        ]
        let path = workspace.url.appendingPathComponent("lines.ndjson").path
        try Data(lines.map { $0 + [0x0A] }.joined()).write(to: URL(fileURLWithPath: path))
        let run = try await BinaryRunner.run(["batch", "--config", config, path])
        let verdicts = try run.stdout.split(separator: "\n").map { try JSONParser.parseObject(Array($0.utf8)) }
        #expect(verdicts.count == lines.count)
        guard verdicts.count == lines.count else { return }
        #expect(verdicts[0]["id"] == .integer(7))
        #expect(verdicts[1]["id"] == .string("after"), "the id is read after the broken member too")
        #expect(verdicts[2]["id"] == .null, "an id that is itself not UTF-8 is not echoed")
        #expect(verdicts[3]["id"] == .null, "two ids: neither is the line's")
        #expect(verdicts[4]["id"] == .array([.integer(1), .object(JSONObject([("k", .string("v"))]))]))
        for index in 0..<5 {
            #expect(verdicts[index]["error"]?.objectValue?["code"] == .string("invalid_request"), "line \(index)")
            #expect(verdicts[index]["valid"] == .bool(false))
        }
        #expect(verdicts[5]["id"] == .integer(5))
        #expect(verdicts[5]["error"]?.objectValue?["code"] == .string("malformed_token"))
        for index in 6..<lines.count {
            #expect(verdicts[index]["id"] == .null, "line \(index): \(verdicts[index])")
            #expect(verdicts[index]["error"]?.objectValue?["code"] == .string("invalid_request"), "line \(index)")
        }
    }

    @Test("a numeric id comes back as it was written, not as the nearest double")
    func numericIDsAsWritten() async throws {
        let workspace = try TempWorkspace()
        let config = try config(workspace)
        let ids = ["18446744073709551615", "123456789012345678901234567890", "1.10", "1e2", "-0.5E-3", "9223372036854775808", "42"]
        let lines = ids.map { "{\"id\":\($0),\"provider\":\"apple\",\"token\":\"a.b.c\"}" }
        let input = try workspace.write("lines.ndjson", lines.joined(separator: "\n") + "\n")
        let run = try await BinaryRunner.run(["batch", "--config", config, input])
        let out = run.stdout.split(separator: "\n")
        #expect(out.count == ids.count)
        for (line, id) in zip(out, ids) {
            #expect(line.hasPrefix("{\"id\":\(id),"), "\(line)")
        }
    }
}
