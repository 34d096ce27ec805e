/// An issuer template (`https://login.microsoftonline.com/{tenantid}/v2.0`) split once into the literal pieces around
/// its `{tenantid}` placeholders, so that a token's issuer is compared with the template filled with the token's `tid`
/// in place: a length check and a few byte compares per token, no scan of the template and no filled string.
///
/// Placeholders are found as ``Swift/String/replacingTenantID(with:)`` finds them (left to right, never overlapping),
/// so a match is exactly `issuer` having the bytes of `template.replacingTenantID(with: tid)`.
public struct TenantIssuerTemplate: Sendable {
    /// The template's bytes with every placeholder left out.
    private let literals: [UInt8]
    /// Where each placeholder stood, as offsets into `literals` (ascending, repeats for adjacent placeholders).
    private let placeholders: [Int]

    public init(_ template: String) {
        let bytes = Array(template.utf8)
        let marker = Array("{tenantid}".utf8)
        var literals: [UInt8] = []
        var placeholders: [Int] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == marker[0], bytes.count - index >= marker.count, bytes[index..<(index + marker.count)].elementsEqual(marker) {
                placeholders.append(literals.count)
                index += marker.count
            } else {
                literals.append(bytes[index])
                index += 1
            }
        }
        self.literals = literals
        self.placeholders = placeholders
    }

    /// Whether the template filled with `tid` has exactly the bytes of `issuer`.
    public func matches(tid: String, issuer: String) -> Bool {
        // Native strings hold their bytes contiguously; the copies are for bridged or lazily made ones.
        let inPlace = tid.utf8.withContiguousStorageIfAvailable { tid in
            issuer.utf8.withContiguousStorageIfAvailable { issuer in matches(tid: tid, issuer: issuer) }
        }
        if let inPlace, let result = inPlace { return result }
        return Array(tid.utf8).withUnsafeBufferPointer { tid in
            Array(issuer.utf8).withUnsafeBufferPointer { issuer in matches(tid: tid, issuer: issuer) }
        }
    }

    func matches(tid: UnsafeBufferPointer<UInt8>, issuer: UnsafeBufferPointer<UInt8>) -> Bool {
        let (tidBytes, overflow) = placeholders.count.multipliedReportingOverflow(by: tid.count)
        guard !overflow, issuer.count - literals.count == tidBytes else { return false }
        let tid = UnsafeRawBufferPointer(tid)
        let issuer = UnsafeRawBufferPointer(issuer)
        return literals.withUnsafeBytes { literals in
            var literalStart = 0
            var position = 0
            // The next bytes of the issuer are `expected`: the length check above keeps every range inside it.
            func next(_ expected: UnsafeRawBufferPointer) -> Bool {
                let end = position + expected.count
                guard ByteCompare.equal(expected, UnsafeRawBufferPointer(rebasing: issuer[position..<end])) else { return false }
                position = end
                return true
            }
            for placeholder in placeholders {
                guard next(UnsafeRawBufferPointer(rebasing: literals[literalStart..<placeholder])), next(tid) else { return false }
                literalStart = placeholder
            }
            return next(UnsafeRawBufferPointer(rebasing: literals[literalStart...]))
        }
    }
}
