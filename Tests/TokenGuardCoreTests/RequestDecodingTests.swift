import Foundation
import Testing
import TokenGuardBatch
import TokenGuardService
import TokenGuardTestSupport

@testable import TokenGuardCore

#if canImport(Glibc)
    import Glibc
#endif

/// Request decoding shared by the HTTP API and the batch tool, and the batch line reader, including the
/// properties the fuzz targets check (Fuzz/Sources), here on fixed and seeded inputs.
struct RequestDecodingTests {
    func object(_ text: String) throws -> JSONObject { try JSONParser.parseObject(Array(text.utf8)) }

    @Test("verify bodies: strict members and types, each refusal a clear invalid_request")
    func verifyBodies() throws {
        let ok = try VerifyRequest(try object(#"{"provider":"apple","token":"a.b.c","nonce":"n","explain":true}"#))
        #expect(ok == VerifyRequest(provider: "apple", token: "a.b.c", nonce: "n", explain: true))
        #expect(try VerifyRequest(try object(#"{"provider":"apple","token":"t","nonce":null,"explain":null}"#)).nonce == nil)
        let refused: [(String, String)] = [
            (#"{"provider":"apple"}"#, "token is required"),
            (#"{"token":"t"}"#, "provider is required"),
            (#"{"provider":"","token":"t"}"#, "provider must be a non-empty string"),
            (#"{"provider":"apple","token":""}"#, "token is empty"),
            (#"{"provider":"apple","token":7}"#, "token must be a string"),
            (#"{"provider":"apple","token":"t","nonce":""}"#, "nonce must be a non-empty string"),
            (#"{"provider":"apple","token":"t","explain":"yes"}"#, "explain must be a boolean"),
            (#"{"provider":"apple","token":"t","at":5}"#, "unknown member \"at\""),
        ]
        for (body, message) in refused {
            let parsed = try object(body)
            do throws(VerificationError) {
                _ = try VerifyRequest(parsed)
                Issue.record("accepted \(body)")
            } catch {
                #expect(error.code == .invalidRequest)
                #expect(error.message.contains(message), "\(body): \(error.message)")
            }
        }
        #expect(throws: VerificationError.self) { try VerifyRequest.parseBody(Array("[1]".utf8)) }
        #expect(throws: VerificationError.self) { try VerifyRequest.parseBody(Array(String(repeating: "[", count: 60_000).utf8)) }
    }

    @Test("batch bodies: only items, an array within the limit; each item decoded on its own")
    func batchBodies() throws {
        let items = try VerifyRequest.batchItems(try object(#"{"items":[{"provider":"a","token":"t"},5,{"token":"t"}]}"#), maximumItems: 3)
        #expect(items.count == 3)
        #expect(try VerifyRequest.item(items[0]).provider == "a")
        #expect(throws: VerificationError.self) { try VerifyRequest.item(items[1]) }
        #expect(throws: VerificationError.self) { try VerifyRequest.item(items[2]) }
        #expect(throws: VerificationError.self) { try VerifyRequest.batchItems(try object(#"{"items":[1,2,3,4]}"#), maximumItems: 3) }
        #expect(throws: VerificationError.self) { try VerifyRequest.batchItems(try object(#"{"items":{}}"#), maximumItems: 3) }
        #expect(throws: VerificationError.self) { try VerifyRequest.batchItems(try object(#"{"items":[],"more":1}"#), maximumItems: 3) }
    }

    @Test("batch lines: id echoed even when the rest is wrong; at within 0…9999-12-31")
    func batchLines() throws {
        let line = try BatchLineRequest(Array(#"{"id":[1],"provider":"p","token":"t","nonce":"n","at":5}"#.utf8), defaultAt: 9)
        #expect(line.id == .array([.integer(1)]) && line.provider == "p" && line.nonce == "n" && line.at == 5)
        #expect(try BatchLineRequest(Array(#"{"provider":"p","token":"t"}"#.utf8), defaultAt: 9).at == 9)
        for (text, id) in [
            (#"{"id":"x","provider":"p","token":"t","at":-1}"#, JSONValue.string("x")),
            (#"{"id":"x","provider":"p","token":"t","at":253402300800}"#, .string("x")),
            (#"{"id":2,"provider":"p","token":"t","at":1.5}"#, .integer(2)),
            (#"{"id":3,"provider":5,"token":"t"}"#, .integer(3)),
            (#"{"id":4,"provider":"p"}"#, .integer(4)),
            ("not json", .null),
        ] {
            do {
                _ = try BatchLineRequest(Array(text.utf8), defaultAt: nil)
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.id == id, "\(text)")
                #expect(error.error.code == .invalidRequest)
            }
        }
    }

    /// What the reader must return, computed the obvious way (the same model as the batch fuzz target).
    static func model(_ content: [UInt8], maximumLineBytes: Int) -> [LineReader.Line] {
        var pieces = content.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map(Array.init)
        if pieces.last?.isEmpty == true { pieces.removeLast() }
        return pieces.map { piece in
            var line = piece
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            return line.count > maximumLineBytes ? .tooLong(line.count, head: Array(line.prefix(LineReader.headBytes))) : .line(line)
        }
    }

    /// A line's bytes, or nil for a line reported too long.
    static func bytes(_ line: LineReader.Line) -> [UInt8]? {
        if case .line(let bytes) = line { return bytes }
        return nil
    }

    static func read(_ content: [UInt8], maximumLineBytes: Int, bufferBytes: Int) throws -> [LineReader.Line] {
        var template = Array("/tmp/tokenguard-lines-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        try #require(fd >= 0)
        defer {
            close(fd)
            unlink(&template)
        }
        _ = content.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        lseek(fd, 0, SEEK_SET)
        var reader = LineReader(fileDescriptor: fd, maximumLineBytes: maximumLineBytes, bufferBytes: bufferBytes)
        var lines: [LineReader.Line] = []
        while let line = try reader.next() { lines.append(line) }
        return lines
    }

    @Test("fuzz regression: a CRLF line exactly at the limit is a line, as it is with LF (Fuzz/regressions/batch)")
    func crlfLineAtLimit() throws {
        // The batch fuzz target's first finding: limit 17, a 17-byte line, then \r\n. It was reported too long
        // because the reader gave up on the line one byte (the \r) before seeing its end.
        let line = Array(#"{"iD":"a.a"#.utf8) + [0xD4, 0x9D] + Array(#".cc"}"#.utf8)
        #expect(line.count == 17)
        for buffer in [1, 17, 18, 19, 64, 65_536] {
            #expect(try Self.read(line + [13, 10], maximumLineBytes: 17, bufferBytes: buffer) == [.line(line)], "buffer \(buffer)")
            #expect(try Self.read(line + [10], maximumLineBytes: 17, bufferBytes: buffer) == [.line(line)], "buffer \(buffer)")
            #expect(try Self.read(line + [13], maximumLineBytes: 17, bufferBytes: buffer) == [.line(line)], "buffer \(buffer), no final newline")
            let over = try Self.read(line + [65, 13, 10], maximumLineBytes: 17, bufferBytes: buffer)
            #expect(over.count == 1 && Self.bytes(over[0]) == nil, "buffer \(buffer): 18 bytes is too long")
        }
    }

    @Test("the line reader matches the obvious split for 3,000 seeded inputs, with buffers as small as one line")
    func lineReaderModel() throws {
        var random = SeededRandom(seed: 0x51_0a_c0de)
        let alphabet: [UInt8] = Array("ab{}\"\r\n\n\n".utf8)
        for round in 0..<3000 {
            let length = Int.random(in: 0...300, using: &random)
            let content = (0..<length).map { _ in alphabet.randomElement(using: &random)! }
            let maximum = Int.random(in: 1...40, using: &random)
            let buffer = Int.random(in: 1...64, using: &random)
            let lines = try Self.read(content, maximumLineBytes: maximum, bufferBytes: buffer)
            let expected = Self.model(content, maximumLineBytes: maximum)
            // Too-long lines are reported with a length; the model's count is of the line without its `\r`.
            let shape = lines.map(Self.bytes)
            let expectedShape = expected.map(Self.bytes)
            #expect(
                shape == expectedShape,
                "round \(round): limit \(maximum), buffer \(buffer), input \(String(decoding: content, as: UTF8.self).debugDescription)")
            if shape != expectedShape { break }
        }
    }
}
