import HTTPTypes

extension HTTPFields {
    /// The value of the one field named `name`; nil when there is none or more than one.
    ///
    /// What `self[name]` gives for a single field, without its cost on every request: that subscript joins every value
    /// through a generic lazy map, which runs unspecialised (about 3,300 instructions per request for Content-Length,
    /// callgrind). Two fields read as none, as their joined value (`5, 5`, or `100-continue, 100-continue`) would
    /// never read as a length or as the one expectation either.
    func onlyValue(_ name: HTTPField.Name) -> String? {
        var found: String? = nil
        for field in self where field.name == name {
            if found != nil { return nil }
            found = field.value
        }
        return found
    }

    /// The Content-Length as a number; nil when absent, repeated or not a string of decimal digits. Digits past what
    /// an `Int` holds read as `Int.max`: HTTP's parser takes lengths up to 2^64 - 1, and such a body is too large,
    /// never of unknown length (which would wait for a body that will not come, or invite one with 100 Continue).
    var announcedContentLength: Int? {
        guard let value = onlyValue(.contentLength), !value.utf8.isEmpty, value.utf8.allSatisfy({ $0 &- UInt8(ascii: "0") < 10 }) else {
            return nil
        }
        return Int(value) ?? Int.max
    }
}
