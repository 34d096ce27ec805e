import Foundation
import Testing
import TokenGuardCore
import TokenGuardTestSupport

/// openapi.yaml against the code: every error code the server can send is in the document's `ErrorCode` enum, so a
/// client validating answers against the document never refuses a real one.
struct OpenAPIDocumentTests {
    /// The member names listed under `components.schemas.NAME`'s block, as `- value` lines or `key:` lines.
    func block(_ name: String, in text: String) -> [Substring] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(of: Substring("    \(name):")) else { return [] }
        var block: [Substring] = []
        for line in lines[(start + 1)...] {
            // The block ends at the next schema (four spaces of indentation, then a name).
            if line.hasPrefix("    ") && !line.hasPrefix("     ") { break }
            block.append(line)
        }
        return block
    }

    @Test("every ErrorCode is in openapi.yaml's ErrorCode enum, and nothing else is")
    func errorCodes() throws {
        let text = try String(contentsOf: TestPaths.repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        let listed = Set(
            block("ErrorCode", in: text).compactMap { line -> String? in
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                return trimmed.hasPrefix("- ") ? String(trimmed.dropFirst(2)) : nil
            })
        #expect(!listed.isEmpty, "no ErrorCode enum found")
        for code in ErrorCode.allCases { #expect(listed.contains(code.rawValue), "openapi.yaml's ErrorCode lacks \(code.rawValue)") }
        #expect(listed == Set(ErrorCode.allCases.map(\.rawValue)))
    }

    @Test("every provider kind /v1/providers can report is in openapi.yaml's ProviderStatus.kind enum")
    func providerKinds() throws {
        let text = try String(contentsOf: TestPaths.repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        let line = try #require(block("ProviderStatus", in: text).first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("kind:") })
        let listed = try #require(line.split(separator: "[").last?.split(separator: "]").first)
        let kinds = Set(listed.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        for kind in ProviderKind.allCases { #expect(kinds.contains(kind.rawValue), "ProviderStatus.kind lacks \(kind.rawValue)") }
    }

    @Test("a batch answer that cannot decide now is in the document: no valid member, error and checks allowed")
    func undecidedAnswer() throws {
        let text = try String(contentsOf: TestPaths.repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        let members = block("UndecidedAnswer", in: text).map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(members.contains { $0.hasPrefix("error:") } && members.contains { $0.hasPrefix("checks:") })
        #expect(!members.contains { $0.hasPrefix("valid:") })
        #expect(text.contains(##"- { $ref: "#/components/schemas/UndecidedAnswer" }"##))
    }
}
