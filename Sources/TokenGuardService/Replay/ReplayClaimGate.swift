/// Lets a caller that answers for several verifications at once (a batch answered at its deadline) account for every
/// replay claim: a claim is taken only through the verification's open gate, and the caller closes the gates before
/// it answers, waiting for the verdicts of the claims that passed. A claim therefore never stands for a verdict the
/// client was not given (its retry would meet `token_replayed`).
package protocol ReplayClaimGate: Sendable {
    /// True when the claim may be taken now; false once the answer is being made without this verification.
    func admitClaim() -> Bool
}

package enum ReplayClaimGates {
    /// The gate of the verification running in this task, if its caller keeps one.
    @TaskLocal package static var current: (any ReplayClaimGate)?
}
