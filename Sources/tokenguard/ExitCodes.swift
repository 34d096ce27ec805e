import ArgumentParser

/// The contract's exit codes.
enum ExitCodes {
    /// The token is valid (or a batch completed with every answer final).
    static let valid = ExitCode(0)
    /// The token was rejected.
    static let rejected = ExitCode(1)
    /// Usage or configuration error.
    static let usage = ExitCode(2)
    /// Cannot decide now: keys or the provider unavailable (retry later).
    static let unavailable = ExitCode(3)
}
