import CCurl
import Foundation
import TokenGuardCore
import TokenGuardService

/// The outbound HTTP client on libcurl, used for every call to a provider.
///
/// - TLS verification is always on (peer and host); there is no option to turn it off.
/// - `https` only, except plain `http` to loopback addresses (tests, the dev IdP); redirects are never followed.
/// - Connect and total timeouts; a response size limit enforced while reading; a cancelled caller's transfer stops
///   within about a second (or never starts).
/// - Blocking `curl_easy_perform` runs on threads of this client's own, never on Swift's cooperative pool or an
///   event loop; callers `await`. Each transfer has an easy handle of its own (see ``send(_:)``).
package final class CurlHTTPClient: HTTPFetching {
    package struct Configuration: Sendable {
        /// Connect timeout (default 2 s).
        package var connectTimeoutMilliseconds = 2_000
        /// Whole-request timeout (default 5 s).
        package var totalTimeoutMilliseconds = 5_000
        /// Worker threads, hence concurrent transfers (default 4).
        package var threads = 4
        package var userAgent = "tokenguard/\(TokenGuardVersion.string) (+https://github.com/tokenguard)"
        /// A CA bundle used instead of libcurl's default (`http.ca_file`: the composition root passes the system's
        /// bundle with the extra CAs appended, so both are trusted). Verification stays on either way.
        package var caBundlePath: String? = nil

        package init() {}
    }

    package let configuration: Configuration
    private let workers: ThreadConfinedWorkers<Void>

    package init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.workers = ThreadConfinedWorkers(threads: configuration.threads, name: "tokenguard-curl") { () }
    }

    deinit { workers.shutdown() }

    package func send(_ request: HTTPRequest) async throws(FetchError) -> HTTPResponse {
        let (scheme, _) = try OutboundURL.validate(request.url)
        let configuration = self.configuration
        let cancellation = TransferCancellation()
        let called = DispatchTime.now().uptimeNanoseconds
        let result: Result<HTTPResponse, FetchError> = await withTaskCancellationHandler {
            await workers.run { _ in
                guard !cancellation.isSet else { return .failure(Self.cancelled) }
                // The whole-request timeout runs from the call, not from when a thread takes it: behind transfers to an
                // upstream that hangs, a queued call must not wait its turn and then the full timeout again (red team
                // 20: 16 inspections admitted to 4 threads answered after up to 15 s).
                guard let configuration = Self.remaining(configuration, calledAt: called) else {
                    return .failure(
                        FetchError(.timeout, "no transfer could start within \(configuration.totalTimeoutMilliseconds) ms (every thread was busy)"))
                }
                // A fresh easy handle per transfer, freed when it ends: libcurl 7.88 (Debian 12) corrupts its heap when
                // a reset, reused handle meets a response whose first header line is folded (any upstream could crash
                // the service with one reply). The price is a new connection and TLS handshake per outbound call.
                guard let handle = try? CurlEasyHandle() else { return .failure(FetchError(.transport, "curl_easy_init failed")) }
                return Result { () throws(FetchError) -> HTTPResponse in
                    try Self.perform(
                        request, allowPlainHTTP: scheme == "http", configuration: configuration, handle: handle, cancellation: cancellation)
                }
            }
        } onCancel: {
            cancellation.set()
        }
        return try result.get()
    }

    /// `configuration` with the time left of its whole-request timeout since `calledAt` (uptime nanoseconds), the
    /// connect timeout within it; nil when none is left.
    package static func remaining(_ configuration: Configuration, calledAt: UInt64, now: UInt64 = DispatchTime.now().uptimeNanoseconds)
        -> Configuration?
    {
        let waited = now > calledAt ? Int(clamping: (now - calledAt) / 1_000_000) : 0
        guard waited < configuration.totalTimeoutMilliseconds else { return nil }
        var left = configuration
        left.totalTimeoutMilliseconds = configuration.totalTimeoutMilliseconds - waited
        left.connectTimeoutMilliseconds = min(configuration.connectTimeoutMilliseconds, left.totalTimeoutMilliseconds)
        return left
    }

    /// One blocking transfer on a worker thread's own handle.
    static func perform(
        _ request: HTTPRequest, allowPlainHTTP: Bool, configuration: Configuration, handle: CurlEasyHandle,
        cancellation: TransferCancellation = TransferCancellation()
    ) throws(FetchError) -> HTTPResponse {
        handle.reset()
        let state = TransferState(maximumBytes: request.maximumResponseBytes, cancellation: cancellation)
        let unmanaged = unsafe Unmanaged.passRetained(state)
        defer { unsafe unmanaged.release() }
        let headerList = CurlHeaderList(request.headers + [("Expect", "")])
        try handle.set(CURLOPT_URL, request.url)
        try handle.set(CURLOPT_PROTOCOLS_STR, allowPlainHTTP ? "http,https" : "https")
        try handle.set(CURLOPT_REDIR_PROTOCOLS_STR, "https")
        // Redirects are never followed: a discovered jwks_uri is checked against the issuer's origin, and an open
        // redirect there must not lead to keys elsewhere; nor may a 307 re-send a user's token to another host.
        try handle.set(CURLOPT_FOLLOWLOCATION, 0)
        // Certificate and host-name verification: explicitly on, whatever libcurl's build defaults are.
        try handle.set(CURLOPT_SSL_VERIFYPEER, 1)
        try handle.set(CURLOPT_SSL_VERIFYHOST, 2)
        if let caBundlePath = configuration.caBundlePath { try handle.set(CURLOPT_CAINFO, caBundlePath) }
        try handle.set(CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeoutMilliseconds)
        try handle.set(CURLOPT_TIMEOUT_MS, configuration.totalTimeoutMilliseconds)
        // No signals: timeouts must not use SIGALRM in a multi-threaded process.
        try handle.set(CURLOPT_NOSIGNAL, 1)
        // Through a proxy (`https_proxy` in the environment), the proxy's CONNECT reply is not the upstream's: its
        // header lines must neither count as the upstream's (a Cache-Control) nor fail a strict read of them.
        try handle.set(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        try handle.set(CURLOPT_USERAGENT, configuration.userAgent)
        try handle.set(CURLOPT_MAXFILESIZE, request.maximumResponseBytes)
        try handle.set(headers: headerList)
        try unsafe handle.setWriteCallback(curlWriteCallback)
        try unsafe handle.set(CURLOPT_WRITEDATA, pointer: unmanaged.toOpaque())
        try unsafe handle.setHeaderCallback(curlHeaderCallback)
        try handle.set(CURLOPT_NOPROGRESS, 0)
        try unsafe handle.setProgressCallback(curlProgressCallback)
        try unsafe handle.set(CURLOPT_XFERINFODATA, pointer: unmanaged.toOpaque())
        try unsafe handle.set(CURLOPT_HEADERDATA, pointer: unmanaged.toOpaque())
        let body = request.body ?? []
        if request.method == .post {
            try handle.set(CURLOPT_POST, 1)
            try handle.set(CURLOPT_POSTFIELDSIZE, body.count)
        }
        let code: CURLcode = unsafe body.withUnsafeBytes { raw in
            if request.method == .post {
                _ = unsafe tg_curl_easy_setopt_ptr(handle.raw, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: raw.baseAddress))
            }
            return unsafe curl_easy_perform(handle.raw)
        }
        guard code == CURLE_OK else {
            if code == CURLE_ABORTED_BY_CALLBACK && cancellation.isSet { throw Self.cancelled }
            switch state.headerRefusal {
            case .tooManyHeaders?: throw FetchError(.tooLarge, "more than \(ResponseHeaderReader.maximumHeaders) response header lines")
            case .malformedLine?: throw FetchError(.transport, "a response header line that is not \"name: value\" with a token name")
            case nil: break
            }
            throw Self.error(for: code, exceeded: state.exceeded, limit: request.maximumResponseBytes)
        }
        let status = handle.responseCode()
        // Only a status that sends the client elsewhere is a redirect; any other (304, 1xx, 999) reaches the caller,
        // which accepts 200 alone, and is reported as the status it was.
        if [301, 302, 303, 307, 308].contains(status) {
            throw FetchError(.redirect, "HTTP \(status): redirects are not followed")
        }
        return HTTPResponse(status: status, headers: state.headers, body: state.body)
    }

    static let cancelled = FetchError(.cancelled, "the caller stopped waiting")

    static func error(for code: CURLcode, exceeded: Bool, limit: Int) -> FetchError {
        let text = unsafe String(cString: curl_easy_strerror(code))
        if exceeded || code == CURLE_FILESIZE_EXCEEDED { return FetchError(.tooLarge, "response larger than \(limit) bytes") }
        switch code {
        case CURLE_OPERATION_TIMEDOUT: return FetchError(.timeout, text)
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: return FetchError(.connect, text)
        case CURLE_TOO_MANY_REDIRECTS: return FetchError(.redirect, text)
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT: return FetchError(.invalidURL, text)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE:
            return FetchError(.tls, text)
        default: return FetchError(.transport, text)
        }
    }
}
