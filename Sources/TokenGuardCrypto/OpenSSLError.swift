import COpenSSL

/// A failure inside OpenSSL, with the library's own reason string for diagnostics.
///
/// Callers in the core map this to a contract error code; it never reaches a user as-is.
public struct OpenSSLError: Error, Sendable, CustomStringConvertible {
    public let operation: String
    public let reason: String

    init(_ operation: String) {
        self.operation = operation
        self.reason = OpenSSLError.drainErrorQueue()
    }

    public var description: String { reason.isEmpty ? operation : "\(operation): \(reason)" }

    /// Reads and clears this thread's OpenSSL error queue, so a failure never leaks into the next call.
    static func drainErrorQueue() -> String {
        var first = ""
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            if first.isEmpty {
                var buffer = [CChar](repeating: 0, count: 256)
                unsafe ERR_error_string_n(code, &buffer, buffer.count)
                first = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        }
        return first
    }
}

/// Process-wide OpenSSL set-up, done once by the composition root before any other OpenSSL call.
public enum OpenSSLRuntime {
    /// Keeps OpenSSL's global state alive until the process is gone: without it, `exit` runs OpenSSL's atexit
    /// clean-up while a key-refresh or HTTP worker thread may still be inside libcrypto (a crash at exit).
    public static func keepStateUntilExit() {
        _ = unsafe tg_openssl_init_no_atexit()
    }
}
