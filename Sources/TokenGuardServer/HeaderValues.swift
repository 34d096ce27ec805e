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

    /// The Content-Length as a number; nil when absent, repeated or not a number.
    var announcedContentLength: Int? { onlyValue(.contentLength).flatMap { Int($0) } }
}
