import Hummingbird

/// tokenguard's request context. The upload limit here is the largest any route accepts; each route also
/// collects its body up to its own, smaller limit.
public struct TokenGuardRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var maxUploadSize: Int { 64 * 1024 * 1024 }

    public init(source: Source) {
        coreContext = .init(source: source)
    }
}
