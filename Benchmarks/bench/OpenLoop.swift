import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// The latency generator, `bench --open-loop-child PORT REQUEST_FILE RATE SECONDS CONNECTIONS`, run in a process of
/// its own pinned to the core the server does not use, as wrk is. One thread drives keep-alive connections, each
/// sending on a fixed schedule (wrk2's design). Latency runs from the scheduled send time, so an answer that comes
/// late delays the next send but not its clock: queueing counts (no coordinated omission).
///
/// What it does not model: arrivals are evenly spaced (random arrivals queue more at high load), and each connection
/// has one request in flight, which suits a server bound by its CPU (as here) but not one that waits on something else.
///
/// The libcurl client this replaces handed every request to a worker thread and woke from `Task.sleep` on the
/// server's core; its own hand-offs and wake-ups were a large part of the tail it reported.
enum OpenLoop {
    struct Report {
        /// Answers of every status.
        var answered = 0
        /// Answers that were not 2xx: they are not latency samples (a quick refusal is no fast verdict).
        var failures = 0
        /// Milliseconds, one per 2xx answer, sorted.
        var latencies: [Double] = []
        /// Answers per second from the first scheduled send to the last answer: below the offered rate when the
        /// server falls behind.
        var achievedPerSecond = 0.0
    }

    /// How long past the schedule's end the last answers may take before the run is declared failed.
    static let answerGraceNanoseconds: Int64 = 10_000_000_000

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The monotonic clock (libdispatch's uptime is CLOCK_MONOTONIC on Linux).
    static func nanoseconds() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds) }

    /// One keep-alive connection and the answer it is reading.
    struct Connection {
        var descriptor: Int32
        var scheduled: Int64
        var waiting = false
        var received: [UInt8] = []
    }

    static func connect(port: Int) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw Failure(description: "socket failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(descriptor)
            throw Failure(description: "connect to 127.0.0.1:\(port) failed: errno \(errno)")
        }
        var one: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        return descriptor
    }

    /// The status and total length of the first complete answer in `bytes`, or nil while it is incomplete.
    /// The servers measured here frame every answer with Content-Length.
    static func completeAnswer(_ bytes: [UInt8]) throws -> (status: Int, length: Int)? {
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        guard bytes.count >= 12, let headerEnd = (0...(bytes.count - 4)).first(where: { bytes[$0..<($0 + 4)].elementsEqual(end) }) else {
            return nil
        }
        let head = String(decoding: bytes[0..<headerEnd], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        let statusParts = lines.first?.split(separator: " ") ?? []
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw Failure(description: "unreadable status line") }
        guard
            let lengthLine = lines.dropFirst().first(where: { $0.lowercased().hasPrefix("content-length:") }),
            let length = Int(lengthLine.dropFirst("content-length:".count).trimmingPrefix(while: { $0 == " " || $0 == "\t" }))
        else { throw Failure(description: "an answer without Content-Length") }
        let total = headerEnd + 4 + length
        return bytes.count >= total ? (status, total) : nil
    }

    static func run(port: Int, request: [UInt8], rate: Double, seconds: Double, connections count: Int) throws -> Report {
        var connections = try (0..<count).map { _ in Connection(descriptor: try connect(port: port), scheduled: 0) }
        defer { for connection in connections { close(connection.descriptor) } }
        // One request per connection before the schedule starts: a fresh connection's first answer is slower
        // (allocation on both sides) and would otherwise sit in the tail of every run.
        for connection in connections { try warmUp(connection.descriptor, request: request) }
        let interval = Int64(Double(count) / max(rate, 1) * 1e9)
        let start = nanoseconds() + 10_000_000
        let end = start + Int64(seconds * 1e9)
        for index in connections.indices { connections[index].scheduled = start + interval * Int64(index) / Int64(count) }
        var report = Report()
        report.latencies.reserveCapacity(Int(rate * seconds * 1.1) + 16)
        var polled = [pollfd](repeating: pollfd(), count: count)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let now = nanoseconds()
            var next = Int64.max
            var active = false
            for index in connections.indices {
                if !connections[index].waiting && connections[index].scheduled < end {
                    active = true
                    if connections[index].scheduled <= now {
                        let sent = request.withUnsafeBytes { write(connections[index].descriptor, $0.baseAddress, $0.count) }
                        // The request is a few hundred bytes on an idle connection's empty send buffer.
                        guard sent == request.count else { throw Failure(description: "a request was not sent whole: \(sent)") }
                        connections[index].waiting = true
                    } else {
                        next = min(next, connections[index].scheduled)
                    }
                }
                active = active || connections[index].waiting
                polled[index] = pollfd(fd: connections[index].descriptor, events: connections[index].waiting ? Int16(POLLIN) : 0, revents: 0)
            }
            guard active else { break }
            guard now < end + answerGraceNanoseconds else { throw Failure(description: "the server stopped answering") }
            // poll's timeout is in milliseconds: sleep whole milliseconds short of the next send, then spin (this
            // process has its own core), so a late wake-up is not counted as the server's latency.
            let wait = next == Int64.max ? 100 : Int32(max(0, (next - nanoseconds() - 200_000) / 1_000_000))
            guard poll(&polled, nfds_t(count), wait) > 0 else { continue }
            for index in connections.indices where polled[index].revents != 0 {
                let read = buffer.withUnsafeMutableBytes { Glibc.read(connections[index].descriptor, $0.baseAddress, $0.count) }
                let arrived = nanoseconds()
                if read < 0 && (errno == EAGAIN || errno == EINTR) { continue }
                guard read > 0 else { throw Failure(description: "the server closed a connection") }
                connections[index].received += buffer[0..<read]
                guard let answer = try completeAnswer(connections[index].received) else { continue }
                report.answered += 1
                if (200..<300).contains(answer.status) {
                    report.latencies.append(Double(arrived - connections[index].scheduled) / 1e6)
                } else {
                    report.failures += 1
                }
                report.achievedPerSecond = Double(report.answered) / (Double(arrived - start) / 1e9)
                connections[index].received.removeFirst(answer.length)
                connections[index].waiting = false
                connections[index].scheduled += interval
            }
        }
        report.latencies.sort()
        return report
    }

    /// Sends `request` and reads its answer, blocking (the descriptor is non-blocking, so readiness is polled).
    static func warmUp(_ descriptor: Int32, request: [UInt8]) throws {
        let sent = request.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard sent == request.count else { throw Failure(description: "a warm-up request was not sent whole") }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while try completeAnswer(received) == nil {
            var polled = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
            guard poll(&polled, 1, 10_000) > 0 else { throw Failure(description: "no answer to a warm-up request within 10 s") }
            let read = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if read < 0 && (errno == EAGAIN || errno == EINTR) { continue }
            guard read > 0 else { throw Failure(description: "the server closed a connection") }
            received += buffer[0..<read]
        }
    }

    /// The child's side: runs the schedule and prints "achieved/s failures p50 p99 p99.9" (milliseconds; nan without
    /// a 2xx answer).
    static func child(arguments: [String]) throws {
        guard arguments.count == 5, let port = Int(arguments[0]), let rate = Double(arguments[2]), let seconds = Double(arguments[3]),
            let connections = Int(arguments[4]), (1...1024).contains(connections),
            // Bounded before any conversion to integers: a NaN, an infinity or a huge rate must not reach a trap.
            rate.isFinite, rate > 0, rate <= 10_000_000, seconds.isFinite, seconds > 0, seconds <= 3600,
            // The latency samples are reserved up front: at most 100 million of them.
            rate * seconds <= 100_000_000
        else { throw Failure(description: "--open-loop-child PORT REQUEST_FILE RATE SECONDS CONNECTIONS") }
        guard let file = fopen(arguments[1], "rb") else { throw Failure(description: "cannot read \(arguments[1])") }
        var request: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count == 0 { break }
            request += chunk[0..<count]
        }
        fclose(file)
        let report = try run(port: port, request: request, rate: rate, seconds: seconds, connections: connections)
        let sorted = report.latencies
        print(
            report.achievedPerSecond, report.failures, Measure.percentile(sorted, 0.5), Measure.percentile(sorted, 0.99),
            Measure.percentile(sorted, 0.999))
    }
}
