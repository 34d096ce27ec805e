import CCurl
import TokenGuardCore
import TokenGuardService

/// Owns one libcurl easy handle. Confined to the worker thread that created it; never shared.
///
/// Reusing the handle across requests (`curl_easy_reset` keeps its connection cache and TLS sessions) is what
/// makes repeated fetches from the same provider cheap.
@safe final class CurlEasyHandle {
    let raw: UnsafeMutableRawPointer

    init() throws(FetchError) {
        _ = CurlGlobal.initialised
        guard let handle = unsafe curl_easy_init() else { throw FetchError(.transport, "curl_easy_init failed") }
        unsafe raw = unsafe handle
    }

    deinit { unsafe curl_easy_cleanup(raw) }

    func reset() { unsafe curl_easy_reset(raw) }

    func set(_ option: CURLoption, _ value: Int) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_long(raw, option, value), option)
    }

    /// libcurl copies string options, so the Swift string need only live for the call.
    func set(_ option: CURLoption, _ value: String) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_string(raw, option, value), option)
    }

    func set(_ option: CURLoption, pointer: UnsafeMutableRawPointer?) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_ptr(raw, option, pointer), option)
    }

    func set(headers list: CurlHeaderList) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_slist(raw, CURLOPT_HTTPHEADER, list.raw), CURLOPT_HTTPHEADER)
    }

    func setWriteCallback(_ callback: curl_write_callback) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_write_callback(raw, callback), CURLOPT_WRITEFUNCTION)
    }

    func setHeaderCallback(_ callback: curl_write_callback) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_header_callback(raw, callback), CURLOPT_HEADERFUNCTION)
    }

    func setProgressCallback(_ callback: curl_xferinfo_callback) throws(FetchError) {
        try unsafe check(tg_curl_easy_setopt_xferinfo_callback(raw, callback), CURLOPT_XFERINFOFUNCTION)
    }

    func responseCode() -> Int {
        var code = 0
        _ = unsafe tg_curl_easy_getinfo_long(raw, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    private func check(_ code: CURLcode, _ option: CURLoption) throws(FetchError) {
        guard code == CURLE_OK else {
            throw FetchError(.transport, unsafe "curl_easy_setopt(\(option.rawValue)): \(String(cString: curl_easy_strerror(code)))")
        }
    }
}

@available(*, unavailable)
extension CurlEasyHandle: Sendable {}

/// `curl_global_init` must run once before any other call and is not thread-safe; a Swift global initialiser
/// runs exactly once, safely.
enum CurlGlobal {
    static let initialised: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK
}

/// Owns a `curl_slist` of request headers; it must outlive the transfer that uses it.
@safe final class CurlHeaderList {
    private(set) var raw: UnsafeMutablePointer<curl_slist>?

    init(_ headers: [(String, String)]) {
        for (name, value) in headers { unsafe raw = unsafe curl_slist_append(raw, "\(name): \(value)") }
    }

    deinit { unsafe curl_slist_free_all(raw) }
}
