import TokenGuardBatch
import TokenGuardService

@testable import TokenGuardCore

#if canImport(Glibc)
    import Glibc
#endif

/// The NDJSON batch reader: line splitting over a real file descriptor with small buffers, each line decoded
/// as a request and verified with the sample keys, each verdict written as a JSON line.
///
/// The first two bytes choose the line limit and buffer size; the rest is the file. Properties: nothing
/// traps; the lines read are exactly the file split at `\n` (one trailing `\r` removed, a last unterminated
/// line kept, an empty tail dropped), with a line over the limit reported as too long instead; every verdict
/// line is one JSON object whose first member is the request's `id`.
enum BatchLinesFuzzTarget {
    /// One scratch file, rewritten for each input.
    static let scratch: Int32 = {
        var template = Array("/tmp/tokenguard-fuzz-batch-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        if fd < 0 { fatalError("cannot create a scratch file") }
        unlink(&template)
        return fd
    }()

    enum Expected: Equatable {
        case line([UInt8])
        case tooLong
    }

    static let target = FuzzTarget(name: "batch", summary: "NDJSON batch reader, line requests and verdict lines") { bytes in
        guard bytes.count >= 2 else { return }
        let maximumLineBytes = 1 + Int(bytes[0]) * 4
        let bufferBytes = 1 + Int(bytes[1]) * 8
        let content = Array(bytes[2...])
        let lines = readLines(content, maximumLineBytes: maximumLineBytes, bufferBytes: bufferBytes)
        let expected = model(content, maximumLineBytes: maximumLineBytes)
        require(lines == expected, "read \(lines.count) lines, expected \(expected.count) (limit \(maximumLineBytes), buffer \(bufferBytes))")
        for case .line(let line) in lines.prefix(8) {
            checkDirectReader(line)
            let (id, json) = verdictLine(line)
            guard case .object(let object)? = try? JSONParser.parse(json) else { fatalError("a verdict line is not a JSON object") }
            require(object.members.first?.name == "id", "a verdict line does not start with id")
            require(object["id"] == id, "a verdict line does not echo the request's id")
        }
    }

    /// The direct reader of batch lines gives what the general path gives for every line it reads (the same request,
    /// an id echoed as the same bytes), and the line's decoding is the general path's whatever the direct reader says.
    static func checkDirectReader(_ line: [UInt8]) {
        func outcome(_ decode: () throws(BatchLineRequest.Invalid) -> BatchLineRequest) -> [UInt8] {
            do {
                let request = try decode()
                var out = JSONWriter.bytes(request.id) + [0] + Array(request.provider.utf8) + [0] + Array(request.token.utf8)
                out += [0] + (request.nonce.map { [1] + Array($0.utf8) } ?? [2]) + [0] + Array((request.at.map(String.init) ?? "-").utf8)
                return out
            } catch {
                return [9] + JSONWriter.bytes(error.id) + [0] + Array((error.provider ?? "-").utf8) + [0] + Array(error.error.message.utf8)
            }
        }
        let general = outcome { () throws(BatchLineRequest.Invalid) in try BatchLineRequest(generally: line, defaultAt: 7) }
        let decoded = outcome { () throws(BatchLineRequest.Invalid) in try BatchLineRequest(line, defaultAt: 7) }
        require(decoded == general, "the direct reader and the general path decode a batch line differently")
    }

    static func readLines(_ content: [UInt8], maximumLineBytes: Int, bufferBytes: Int) -> [Expected] {
        let fd = scratch
        require(ftruncate(fd, 0) == 0, "ftruncate")
        let written = content.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        require(written == content.count, "pwrite")
        require(lseek(fd, 0, SEEK_SET) == 0, "lseek")
        var reader = LineReader(fileDescriptor: fd, maximumLineBytes: maximumLineBytes, bufferBytes: bufferBytes)
        var lines: [Expected] = []
        while let line = try? reader.next() {
            switch line {
            case .line(let bytes): lines.append(.line(bytes))
            case .tooLong: lines.append(.tooLong)
            }
            require(lines.count <= content.count + 1, "more lines than bytes")
        }
        return lines
    }

    /// What the reader must return, computed the obvious way.
    static func model(_ content: [UInt8], maximumLineBytes: Int) -> [Expected] {
        var pieces = content.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map(Array.init)
        if pieces.last?.isEmpty == true { pieces.removeLast() }
        return pieces.map { piece in
            var line = piece
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            return line.count > maximumLineBytes ? .tooLong : .line(line)
        }
    }

    /// The batch tool's handling of one line, synchronously: decode, verify with the keys in hand, write.
    static func verdictLine(_ line: [UInt8]) -> (id: JSONValue, json: [UInt8]) {
        let id: JSONValue
        let provider: String?
        let result: VerificationResult
        do {
            let request = try BatchLineRequest(line, defaultAt: FuzzFixtures.now)
            id = request.id
            provider = request.provider
            result =
                FuzzFixtures.registry.verifyWithKeysInHand(provider: request.provider, token: request.token, nonce: request.nonce, at: request.at)
                ?? .failure(VerificationError(.invalidRequest, "opaque"))
        } catch {
            id = error.id
            provider = error.provider
            result = .failure(error.error)
        }
        var object = JSONObject([("id", id)])
        for member in result.json(provider: provider).members { object.set(member.name, member.value) }
        return (id, JSONWriter.bytes(.object(object)))
    }
}
