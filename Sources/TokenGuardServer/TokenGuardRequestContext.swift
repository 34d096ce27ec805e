import Hummingbird

/// tokenguard's request context. The upload limit here is the largest any route accepts; each route also
/// collects its body up to its own, smaller limit.
package struct TokenGuardRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage
    package var maxUploadSize: Int { 64 * 1024 * 1024 }

    package init(source: Source) {
        coreContext = .init(source: source)
    }
}
