import Foundation

/// Runs blocking work (a process's exit, a socket read with a timeout) on a thread of its own and awaits it. A test
/// that blocks one of Swift's cooperative threads instead (two on a two-core machine) for seconds stalls every
/// other test's tasks, and the timing those tests check with them.
package func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

package func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}
