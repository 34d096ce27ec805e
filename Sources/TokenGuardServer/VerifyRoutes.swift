import Dispatch
import Foundation
import Hummingbird
import NIOCore
import TokenGuardCore
import TokenGuardService
import TokenGuardSync

/// `POST /v1/verify` and `POST /v1/verify/batch`.
struct VerifyRoutes: Sendable {
    let registry: VerifierRegistry
    let settings: ServerLimits
    let metrics: ServiceMetrics

    func register(on router: Router<TokenGuardRequestContext>) {
        let seconds = settings.requestTimeoutSeconds
        router.post("/v1/verify") { request, context in
            // The body is read in this task (a client that does not send it in time loses the connection); a verdict
            // that needs no waiting is answered here too, and only the rest runs under the request timeout's task.
            let deadline = RequestTimeout.Deadline(seconds: seconds)
            let item = try await readItem(request, context.channel)
            let verifying = DispatchTime.now()
            if !item.explain,
                let result = registry.verifyWithoutWaiting(provider: item.provider, token: item.token, nonce: item.nonce, claimReplay: true)
            {
                metrics.record(provider: item.provider, result: result, startedAt: verifying)
                return try Self.response(answer(item, result: result, explanation: nil))
            }
            return try await verify(item, before: deadline)
        }
        router.post("/v1/verify/batch") { request, context in
            // As for /v1/verify: the body is read in this task (a client that does not send it in time loses the
            // connection), and only the verification runs under the request timeout's task. Reading it in that task
            // instead gave a slow upload its 503, but the cancelled read then raced the server's own read of the rest
            // of the body on the same stream, and NIO traps on a second reader (red team: one unfinished batch body
            // crashed the server).
            let deadline = RequestTimeout.Deadline(seconds: seconds)
            let object = try await JSONRequestBody.read(
                request, context.channel, limit: settings.maximumBatchBodyBytes, closingAfter: settings.requestTimeoutSeconds)
            return try await batch(object, before: deadline)
        }
    }

    nonisolated(nonsending) func readItem(_ request: Request, _ channel: any Channel) async throws -> VerifyRequest {
        let body = try await JSONRequestBody.bytes(
            request, channel, limit: settings.maximumVerifyBodyBytes, closingAfter: settings.requestTimeoutSeconds)
        do {
            return try VerifyRequest.decodeBody(body.readableBytesView)
        } catch {
            throw APIError.invalidRequest(error.message)
        }
    }

    /// Verifies under the request's deadline. What is counted is what the client is answered: a verification the
    /// deadline cut off counts as `request_timeout`, whatever it comes to later (red team: a slow IdP's late keys
    /// counted a timed-out request as `valid`, or as `unknown_key`, which an alert on forged tokens would see).
    func verify(_ item: VerifyRequest, before deadline: RequestTimeout.Deadline) async throws -> Response {
        let started = DispatchTime.now()
        let registry = self.registry
        let (verified, byShutdown) = await RequestTimeout.within(deadline) {
            await registry.verify(provider: item.provider, token: item.token, nonce: item.nonce, at: nil, explain: item.explain)
        }
        guard let (result, explanation) = verified else {
            metrics.record(provider: item.provider, result: RequestTimeout.timeoutFailure(deadline.seconds, byShutdown), startedAt: started)
            throw RequestTimeout.timeoutError(deadline.seconds, byShutdown)
        }
        metrics.record(provider: item.provider, result: result, startedAt: started)
        return try Self.response(answer(item, result: result, explanation: explanation))
    }

    /// What a verification comes to: a verdict to send (200 valid, 401 refused), or an error for the router to answer
    /// (503 with `Retry-After` for a retryable failure, 400 for a bad request). One decision for both the router and
    /// ``VerifyOnTheEventLoop``.
    enum Answer {
        case verdict(JSONAnswer)
        case refusal(APIError)
    }

    func answer(_ item: VerifyRequest, result: VerificationResult, explanation: Explanation?) -> Answer {
        switch result {
        case .success(let valid):
            guard let explanation else { return .verdict(.json(valid.jsonBytes)) }
            var verdict = result.json(provider: item.provider)
            verdict.set("checks", explanation.json)
            return .verdict(.json(JSONWriter.bytes(.object(verdict))))
        case .failure(let error):
            switch error.code {
            case let code where code.isRetryable:
                return .refusal(
                    APIError(
                        status: .serviceUnavailable, code: error.code, message: error.message,
                        retryAfterSeconds: error.retryAfterSeconds ?? settings.retryAfterSeconds))
            case .unknownProvider, .invalidRequest:
                return .refusal(APIError(status: .badRequest, code: error.code, message: error.message))
            default:
                var verdict = result.json(provider: item.provider)
                if let explanation { verdict.set("checks", explanation.json) }
                return .verdict(.json(JSONWriter.bytes(.object(verdict)), status: .unauthorized))
            }
        }
    }

    static func response(_ answer: Answer) throws -> Response {
        switch answer {
        case .verdict(let verdict): return verdict.response
        case .refusal(let error): throw error
        }
    }

    /// A batch's verdicts, in order. Items not finished within `seconds` are answered `request_timeout` (no `valid`:
    /// retry them) beside the verdicts of those that finished: a 503 for the whole batch would make the client send
    /// again tokens whose verdicts were already made, and whose replay claims already taken, so a retried valid
    /// token would come back `token_replayed`.
    func batch(_ object: JSONObject, before deadline: RequestTimeout.Deadline) async throws -> Response {
        let items: [JSONValue]
        do {
            items = try VerifyRequest.batchItems(object, maximumItems: settings.maximumBatchItems)
        } catch {
            throw APIError.invalidRequest(error.message)
        }
        // At most a few items in flight: a batch of 1,000 tokens must not queue 1,000 jobs ahead of other
        // clients' requests on the shared executor (with two clients looping on maximal batches, a third client's
        // p99 would go from 3 ms to over 400 ms).
        let width = max(2, ProcessInfo.processInfo.activeProcessorCount)
        let progress = BatchProgress(count: items.count)
        let started = DispatchTime.now()
        let (registry, metrics) = (self.registry, self.metrics)
        // At the deadline: what has finished, and for the rest their own verdict or `request_timeout`. The work gives
        // the same answer when it finds itself cancelled (it may finish between the cancellation and the deadline's
        // answer, with items never started).
        let answeredAtDeadline: @Sendable (_ byShutdown: Bool) async -> [[UInt8]] = { byShutdown in
            let timedOut = RequestTimeout.timeoutFailure(deadline.seconds, byShutdown, subject: "item")
            let verdicts = await progress.close()
            // Counted once (the work and the deadline may both make this answer): each item answered request_timeout.
            let counts = progress.claimTimeoutCount()
            return zip(items, verdicts).map { entry, verdict in
                if let verdict { return verdict }
                if let settled = Self.verdictWithoutVerifying(entry, registry: registry) { return settled }
                if counts { metrics.record(provider: entry.objectValue?["provider"]?.stringValue ?? "", result: timedOut, startedAt: started) }
                return Self.entryVerdict(entry, timedOut)
            }
        }
        let results = await RequestTimeout.answer(deadline, onTimeout: answeredAtDeadline) {
            let verdicts = await Self.verifyItems(items, width: width, registry: registry, metrics: metrics, progress: progress)
            return Task.isCancelled ? await answeredAtDeadline(DeadlineWheel.shared.isShuttingDown) : verdicts
        }
        var body = Array(#"{"results":["#.utf8)
        for (index, result) in results.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: result)
        }
        body.append(contentsOf: "]}".utf8)
        return JSONResponse.make(bytes: body)
    }

    /// The verdict of an item that needs no verification: not a valid item, or an unknown provider.
    static func verdictWithoutVerifying(_ entry: JSONValue, registry: VerifierRegistry) -> [UInt8]? {
        do throws(VerificationError) {
            let item = try VerifyRequest.item(entry)
            guard registry.configuredName(item.provider) == nil else { return nil }
            return entryVerdict(entry, .failure(VerifierRegistry.unknownProvider(item.provider)))
        } catch {
            return entryVerdict(entry, .failure(error))
        }
    }

    /// The verdicts of a batch's items as they finish, for an answer made at the deadline.
    ///
    /// Every verdict whose replay claim was kept is in that answer: the store keeps an item's claim only if the batch
    /// is still open when the claim becomes final (``holdClaim(_:)``, through the item's ``ReplayClaimGate``), and
    /// closing waits for the items whose claims it held to record their verdicts (microseconds: nothing is awaited
    /// after a claim). An item answered `request_timeout` has no claim kept behind it, so the client's retry is not
    /// `token_replayed` (red team: valid tokens lost when the deadline fell between an item's claim and the recording
    /// of its verdict). Claims still on their way to Redis are not waited for: the store takes them back when they
    /// land (red team: waiting for them let Redis's queue delay the answer to a paused Redis's return).
    final class BatchProgress: Sendable {
        private struct State {
            var verdicts: [[UInt8]?]
            var closed = false
            /// Items whose claims were held and whose verdicts are not recorded yet.
            var claiming: Set<Int> = []
            var waiting: [CheckedContinuation<[[UInt8]?], Never>] = []
            var timeoutsCounted = false
        }
        private let state: Locked<State>

        init(count: Int) { state = Locked(State(verdicts: [[UInt8]?](repeating: nil, count: count))) }

        struct ItemGate: ReplayClaimGate {
            let progress: BatchProgress
            let index: Int
            var isOpen: Bool { progress.isOpen }
            func holdClaim() -> Bool { progress.holdClaim(index) }
        }

        func gate(_ index: Int) -> ItemGate { ItemGate(progress: self, index: index) }

        var isOpen: Bool { state.withLock { !$0.closed } }

        func holdClaim(_ index: Int) -> Bool {
            state.withLock { state in
                guard !state.closed else { return false }
                state.claiming.insert(index)
                return true
            }
        }

        /// An item's verdict: kept when the batch is open or the item's claim was held before it closed. Returns
        /// whether it was kept (in the answer): an item not kept was answered `request_timeout`.
        @discardableResult
        func record(_ index: Int, _ verdict: [UInt8]) -> Bool {
            let (kept, waiting, verdicts) = state.withLock { state -> (Bool, [CheckedContinuation<[[UInt8]?], Never>], [[UInt8]?]) in
                let claimed = state.claiming.remove(index) != nil
                let kept = !state.closed || claimed
                if kept { state.verdicts[index] = verdict }
                guard state.closed, state.claiming.isEmpty else { return (kept, [], []) }
                defer { state.waiting = [] }
                return (kept, state.waiting, state.verdicts)
            }
            for continuation in waiting { continuation.resume(returning: verdicts) }
            return kept
        }

        /// True the first time only: the items answered `request_timeout` are counted by whoever asks first.
        func claimTimeoutCount() -> Bool {
            state.withLock { state in
                defer { state.timeoutsCounted = true }
                return !state.timeoutsCounted
            }
        }

        /// Each item's verdict, nil for those that finished without one; no claim is held after, and the items whose
        /// claims were held are waited for.
        func close() async -> [[UInt8]?] {
            await withCheckedContinuation { continuation in
                let verdicts = state.withLock { state -> [[UInt8]?]? in
                    state.closed = true
                    guard state.claiming.isEmpty else {
                        state.waiting.append(continuation)
                        return nil
                    }
                    return state.verdicts
                }
                if let verdicts { continuation.resume(returning: verdicts) }
            }
        }
    }

    /// The items' verdicts in order, at most `width` in flight, each recorded in `progress` as it finishes. The
    /// results are written into an array outside the task group: returning them from the group's closure was
    /// miscompiled at -O (Swift 6.3.1), handing the caller uninitialised memory; a release server crashed on
    /// `{"items": []}`.
    static func verifyItems(
        _ items: [JSONValue], width: Int, registry: VerifierRegistry, metrics: ServiceMetrics, progress: BatchProgress? = nil
    ) async -> [[UInt8]] {
        var ordered = [[UInt8]](repeating: [], count: items.count)
        // On the shared pool, not the connection's event loop: a batch's items verify on every core, and a batch of
        // 1,000 does not hold up the other connections served by that loop.
        await withTaskExecutorPreference(globalConcurrentExecutor) {
            await verifyItems(items, width: width, registry: registry, metrics: metrics, progress: progress, into: &ordered)
        }
        return ordered
    }

    private static func verifyItems(
        _ items: [JSONValue], width: Int, registry: VerifierRegistry, metrics: ServiceMetrics, progress: BatchProgress?,
        into ordered: inout [[UInt8]]
    ) async {
        await withTaskGroup(of: (Int, [UInt8]).self) { group in
            var next = 0
            func addNext() {
                let (index, entry) = (next, items[next])
                // Nothing more is started once the batch has been answered at its deadline.
                _ = group.addTaskUnlessCancelled {
                    guard let progress else {
                        let (verdict, outcome) = await Self.verifyItem(entry, registry: registry)
                        if let outcome { metrics.record(provider: outcome.provider, result: outcome.result, startedAt: outcome.started) }
                        return (index, verdict)
                    }
                    let (verdict, outcome) = await ReplayClaimGates.$current.withValue(progress.gate(index)) {
                        await Self.verifyItem(entry, registry: registry)
                    }
                    // What is counted is what the client is answered: a verdict made after the batch was answered is
                    // not in it (its item was answered, and counted, as request_timeout).
                    if progress.record(index, verdict), let outcome {
                        metrics.record(provider: outcome.provider, result: outcome.result, startedAt: outcome.started)
                    }
                    return (index, verdict)
                }
                next += 1
            }
            while next < min(width, items.count) { addNext() }
            while let (index, value) = await group.next() {
                ordered[index] = value
                if next < items.count { addNext() }
            }
        }
    }

    /// A batch entry's verdict as JSON text, its id first (as `tokenguard batch` does; contract: "Batch ids"), for an
    /// entry that may not be a valid item.
    static func entryVerdict(_ entry: JSONValue, _ result: VerificationResult) -> [UInt8] {
        result.jsonBytes(provider: entry.objectValue?["provider"]?.stringValue, leadingID: entry.objectValue?["id"])
    }

    /// What a verification came to, for the metrics.
    struct Outcome: Sendable {
        let provider: String
        let result: VerificationResult
        let started: DispatchTime
    }

    /// One batch entry's verdict, as JSON text: its own `invalid_request` when it is not a valid item; and the
    /// verification's outcome, when there was one, for the caller to count.
    static func verifyItem(_ entry: JSONValue, registry: VerifierRegistry) async -> ([UInt8], Outcome?) {
        let item: VerifyRequest
        // An item's id comes back first in its result, as `tokenguard batch` does (contract: "Batch ids").
        func withID(_ id: JSONValue?, _ verdict: [UInt8]) -> [UInt8] { id.map { JSONWriter.withLeadingID($0, verdict) } ?? verdict }
        do throws(VerificationError) {
            item = try VerifyRequest.item(entry)
        } catch {
            return (entryVerdict(entry, .failure(error)), nil)
        }
        let started = DispatchTime.now()
        let (result, explanation) = await registry.verify(
            provider: item.provider, token: item.token, nonce: item.nonce, at: nil, explain: item.explain)
        let outcome = Outcome(provider: item.provider, result: result, started: started)
        guard let explanation else { return (result.jsonBytes(provider: item.provider, leadingID: item.id), outcome) }
        var verdict = result.json(provider: item.provider)
        verdict.set("checks", explanation.json)
        return (withID(item.id, JSONWriter.bytes(.object(verdict))), outcome)
    }
}
