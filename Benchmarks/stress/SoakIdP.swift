import Foundation
import Synchronization
import TokenGuardCore
import TokenGuardCrypto
import TokenGuardService
import TokenGuardSync
import TokenGuardTestSupport

/// The identity provider of the soak run: a real HTTP server on 127.0.0.1 publishing a JWKS that rotates,
/// and that fails (500) or goes slow (answers after the client gave up) on command.
///
/// It records what it actually delivered, so the checker knows which keys tokenguard could have seen: the
/// first time each kid went out in a good answer, and the first time a good answer went out without it.
final class SoakIdP: Sendable {
    enum Mode: String, Sendable { case normal, failing, slow }

    struct State {
        var published: [TestKey] = []
        var jwks = "{\"keys\":[]}"
        var mode = Mode.normal
        /// Monotonic time each kid was first delivered in a good answer.
        var firstServed: [String: Double] = [:]
        /// Monotonic time a good answer first went out without a kid that had been published.
        var firstServedWithout: [String: Double] = [:]
        var goodAnswers = 0
        var badAnswers = 0
        /// Monotonic times of the good answers, oldest first (about one a second; capped like the soak itself).
        var goodAnswerTimes: [Double] = []
    }

    final class Shared: Sendable {
        let state = Locked(State())
    }

    let shared = Shared()
    let server: FakeHTTPServer
    /// Longer than tokenguard's outbound timeout, so a slow answer is as good as none.
    static let slowDelay = 6.0

    init() throws {
        let shared = self.shared
        server = try FakeHTTPServer { request in
            guard request.path.hasPrefix("/jwks") else { return FakeHTTPServer.Response(status: 404) }
            return shared.state.withLock { state in
                switch state.mode {
                case .failing:
                    state.badAnswers += 1
                    return FakeHTTPServer.Response(status: 500, body: Array("IdP outage (soak)".utf8))
                case .slow:
                    state.badAnswers += 1
                    return FakeHTTPServer.Response(
                        status: 200, headers: [("Content-Type", "application/json")], body: Array(state.jwks.utf8), delay: SoakIdP.slowDelay)
                case .normal:
                    let now = monotonicSeconds()
                    let kids = Set(state.published.map(\.keyID))
                    for kid in kids where state.firstServed[kid] == nil { state.firstServed[kid] = now }
                    for kid in state.firstServed.keys where !kids.contains(kid) && state.firstServedWithout[kid] == nil {
                        state.firstServedWithout[kid] = now
                    }
                    state.goodAnswers += 1
                    if state.goodAnswerTimes.count < 1_000_000 { state.goodAnswerTimes.append(now) }
                    return .json(state.jwks, headers: [("Cache-Control", "max-age=3")])
                }
            }
        }
    }

    var jwksURL: String { server.baseURL + "/jwks" }

    func publish(_ keys: [TestKey]) throws {
        let text = try SharedTestKeys.jwks(keys)
        shared.state.withLock { state in
            state.published = keys
            state.jwks = text
        }
    }

    func set(_ mode: Mode) { shared.state.withLock { $0.mode = mode } }
    func firstServed(_ kid: String) -> Double? { shared.state.withLock { $0.firstServed[kid] } }
    func firstServedWithout(_ kid: String) -> Double? { shared.state.withLock { $0.firstServedWithout[kid] } }
    /// When the IdP first gave a good answer at or after `time`, if it has.
    func firstGoodAnswer(after time: Double) -> Double? {
        shared.state.withLock { state in
            let times = state.goodAnswerTimes
            var low = 0
            var high = times.count
            while low < high {
                let middle = (low + high) / 2
                if times[middle] < time { low = middle + 1 } else { high = middle }
            }
            return low < times.count ? times[low] : nil
        }
    }
    var mode: Mode { shared.state.withLock { $0.mode } }
    var answers: (good: Int, bad: Int) { shared.state.withLock { ($0.goodAnswers, $0.badAnswers) } }
    func stop() { server.stop() }
}
