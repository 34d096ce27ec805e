/// Lets a caller that answers for several verifications at once (a batch answered at its deadline) account for every
/// replay claim. The store asks the verification's gate at the moment a claim would become final (before recording
/// it in memory, on Redis's "claimed" reply): once the caller has closed the gate the claim is not kept, and a claim
/// the gate held is reported to the caller within microseconds (nothing is awaited after it). A claim therefore never
/// stands for a verdict the client was not given (its retry would meet `token_replayed`), and the caller never waits
/// on a store to close.
package protocol ReplayClaimGate: Sendable {
    /// False once the answer is being made without this verification: take no claim.
    var isOpen: Bool { get }
    /// True when the claim may be kept; its verification's verdict is then owed to the caller.
    func holdClaim() -> Bool
}

package enum ReplayClaimGates {
    /// The gate of the verification running in this task, if its caller keeps one.
    @TaskLocal package static var current: (any ReplayClaimGate)?

    /// Whether a claim made now may be kept: not when the request was cancelled (already answered) or its gate refuses.
    package static func mayKeepClaim() -> Bool {
        !Task.isCancelled && (current?.holdClaim() ?? true)
    }

    /// Whether a claim is still worth making: not when the request was cancelled or its gate has closed.
    package static func mayStillClaim() -> Bool {
        !Task.isCancelled && (current?.isOpen ?? true)
    }
}
