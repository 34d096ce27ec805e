import HTTPTypes
import Testing

@testable import TokenGuardServer

struct HeaderValuesTests {
    @Test("the one value of a field; none when absent or repeated, as the joined value would read")
    func onlyValue() {
        var fields = HTTPFields()
        #expect(fields.onlyValue(.contentLength) == nil)
        #expect(fields.announcedContentLength == nil)
        fields.append(HTTPField(name: .contentLength, value: "512"))
        fields.append(HTTPField(name: .expect, value: "100-continue"))
        #expect(fields.onlyValue(.contentLength) == "512")
        #expect(fields.announcedContentLength == 512)
        #expect(fields.onlyValue(.expect) == "100-continue")
        // Two fields: never a length (their joined value "512, 512" is not a number either).
        fields.append(HTTPField(name: .contentLength, value: "512"))
        #expect(fields.onlyValue(.contentLength) == nil)
        #expect(fields.announcedContentLength == nil)
        #expect(fields[.contentLength].flatMap { Int($0) } == nil)
        // Not a number, or a sign: no announced length.
        for value in ["abc", "", "+-5", "+5", "-5", "0x10", "5 5", "5\u{0660}"] {
            var single = HTTPFields()
            single.append(HTTPField(name: .contentLength, value: value))
            #expect(single.announcedContentLength == nil, "\(value.debugDescription)")
        }
        // Digits past Int.max (HTTP's parser passes up to 2^64 - 1) are too large, never of unknown length.
        for value in ["9223372036854775807", "9223372036854775808", "18446744073709551615", "99999999999999999999999"] {
            var huge = HTTPFields()
            huge.append(HTTPField(name: .contentLength, value: value))
            #expect(huge.announcedContentLength == Int.max, "\(value)")
        }
        var justBelow = HTTPFields()
        justBelow.append(HTTPField(name: .contentLength, value: "9223372036854775806"))
        #expect(justBelow.announcedContentLength == Int.max - 1)
        // A field's value is kept without the blanks around it (as HTTP reads it), so " 5 " is 5, as before.
        var padded = HTTPFields()
        padded.append(HTTPField(name: .contentLength, value: " 5 "))
        #expect(padded.announcedContentLength == 5)
        #expect(padded.announcedContentLength == padded[.contentLength].flatMap { Int($0) })
        // Names compare without regard to case, as HTTPFields does.
        var mixed = HTTPFields()
        mixed.append(HTTPField(name: HTTPField.Name("CONTENT-LENGTH")!, value: "7"))
        #expect(mixed.announcedContentLength == 7)
    }

    @Test("the Connection field's name is recognised in any case, and no other name is")
    func connectionName() {
        for name in ["connection", "Connection", "CONNECTION", "cOnNeCtIoN"] { #expect(HTTP1VersionRules.isConnection(name), "\(name)") }
        for name in ["connectio", "connections", "Connection ", "proxy-connection", "connectioN\u{0}", "", "cmnnection", "Konnection"] {
            #expect(!HTTP1VersionRules.isConnection(name), "\(name.debugDescription)")
        }
        // Every byte that is not a letter of the name, put in each place, is refused (the case bit is no wildcard).
        let word = Array("connection".utf8)
        for index in word.indices {
            for byte in UInt8(0)...UInt8(255) where byte | 0x20 != word[index] {
                var altered = word
                altered[index] = byte
                #expect(!HTTP1VersionRules.isConnection(String(decoding: altered, as: UTF8.self)))
            }
        }
    }
}
