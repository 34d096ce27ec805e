import Foundation

/// `redis://[USER@]HOST:PORT[/DB]`, read strictly: a URL this accepts is one hiredis can dial as written, so a typo
/// fails the config check instead of every request. No password: secrets never live in the file.
package struct RedisURL: Sendable, Equatable {
    package var user: String?
    package var host: String
    package var port: Int
    package var database: Int?

    package static let shape = "redis://[USER@]HOST:PORT[/DB]"

    /// The URL's parts, or why it is refused (the reason names no secret).
    package static func parse(_ url: String) -> Result<RedisURL, RedisURLError> {
        guard url.hasPrefix("redis://") else { return .failure(RedisURLError("must be \(shape)")) }
        var rest = Substring(url.dropFirst("redis://".count))
        var user: String? = nil
        if let at = rest.firstIndex(of: "@") {
            let userPart = rest[..<at]
            guard !userPart.contains(":") else {
                return .failure(RedisURLError("must not carry a password: name it with password_env or password_file"))
            }
            guard !userPart.isEmpty, userPart.utf8.count <= 128, userPart.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") })
            else { return .failure(RedisURLError("has a bad user name")) }
            user = String(userPart)
            rest = rest[rest.index(after: at)...]
        }
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count)
        guard let (host, port) = hostPort(authority) else { return .failure(RedisURLError("must be \(shape) with a host name or address")) }
        var parsed = RedisURL(user: user, host: host, port: port, database: nil)
        if !path.isEmpty && path != "/" {
            let digits = path.dropFirst()
            guard (1...4).contains(digits.utf8.count), digits.utf8.allSatisfy({ (48...57).contains($0) }), let database = Int(digits),
                (0...1023).contains(database)
            else { return .failure(RedisURLError("has a bad database index: 0 to 1023")) }
            parsed.database = database
        }
        return .success(parsed)
    }

    /// `HOST:PORT` with a DNS name, an IPv4 address or a bracketed IPv6 address (returned without brackets); the port
    /// decimal digits only, 1 to 65535.
    package static func hostPort(_ text: Substring) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":") else { return nil }
        let hostPart = text[..<colon]
        let portPart = text[text.index(after: colon)...]
        guard (1...5).contains(portPart.utf8.count), portPart.utf8.allSatisfy({ (48...57).contains($0) }), let port = Int(portPart),
            (1...65535).contains(port)
        else { return nil }
        let bytes = Array(hostPart.utf8)
        if bytes.first == UInt8(ascii: "[") {
            guard bytes.count > 2, bytes.last == UInt8(ascii: "]") else { return nil }
            let inner = String(decoding: bytes[1..<(bytes.count - 1)], as: UTF8.self)
            return isAddress(inner, family: AF_INET6) ? (inner, port) : nil
        }
        guard (1...253).contains(bytes.count) else { return nil }
        let labels = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        for label in labels {
            guard (1...63).contains(label.count), label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-"),
                label.allSatisfy({ isHexDigit($0) || (65...90).contains($0) || (97...122).contains($0) || $0 == UInt8(ascii: "-") })
            else { return nil }
        }
        let host = String(decoding: bytes, as: UTF8.self)
        // No top-level domain starts with a digit: such a host is an IPv4 address, and only the dotted-decimal form
        // is taken (the resolver would also read "0x7f.1" or "127.1" as addresses).
        if let last = labels.last?.first, (48...57).contains(last) {
            let octets = labels.compactMap { label in
                label.count <= 3 && label.allSatisfy({ (48...57).contains($0) }) ? Int(String(decoding: label, as: UTF8.self)) : nil
            }
            guard labels.count == 4, octets.count == 4, octets.allSatisfy({ $0 <= 255 }), isAddress(host, family: AF_INET) else { return nil }
        }
        return (host, port)
    }

    /// True when `text` is an address of `family` as `inet_pton` reads it.
    private static func isAddress(_ text: String, family: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return inet_pton(family, text, &buffer) == 1
    }

    /// `host:port` for logs and `/readyz`, an IPv6 address in brackets.
    package static func display(host: String, port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (48...57).contains(byte) || (65...70).contains(byte) || (97...102).contains(byte)
    }
}

package struct RedisURLError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
