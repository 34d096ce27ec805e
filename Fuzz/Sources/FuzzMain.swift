/// libFuzzer entry point for every tokenguard fuzz target (scripts/fuzz.sh builds and runs them).
///
/// Usage: `tokenguard-fuzz TARGET [libFuzzer options and corpus folders]`, or `tokenguard-fuzz --list`.
/// SwiftPM links an executable with `main` renamed to `tokenguard_fuzz_main`; that function takes the target
/// name off the arguments and hands the rest to libFuzzer's driver.
///
/// Built without the fuzzer (a plain `swift build`, where libFuzzer is not linked), the same binary replays
/// the files it is given through the target once each: `tokenguard-fuzz TARGET FILE...`.
import Foundation

#if TOKENGUARD_FUZZ
    // swift-format-ignore: AlwaysUseLowerCamelCase
    // libFuzzer's C entry point keeps its C name.
    @_silgen_name("LLVMFuzzerRunDriver")
    func LLVMFuzzerRunDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt
#endif

/// A fuzz target: takes one input, checks the properties that must hold for it, traps when one does not.
struct FuzzTarget: Sendable {
    let name: String
    let summary: String
    let run: @Sendable ([UInt8]) -> Void
}

let allTargets: [FuzzTarget] = [
    JWSFuzzTarget.target, JWKSFuzzTarget.target, ClaimsFuzzTarget.target, ConfigFuzzTarget.target,
    BatchLinesFuzzTarget.target, HTTPRequestFuzzTarget.target, UpstreamFuzzTarget.opaque, UpstreamFuzzTarget.discovery,
    ForwardAuthFuzzTarget.target, JSONIndexFuzzTarget.target,
]

nonisolated(unsafe) var selectedTarget: FuzzTarget? = nil

/// A property every input must satisfy. A violation is a finding: trap so libFuzzer saves the input.
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("fuzz property violated: \(message())", file: file, line: line) }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    selectedTarget?.run(bytes)
    return 0
}

@_cdecl("tokenguard_fuzz_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    guard argc >= 2, let argv, let first = argv[1] else {
        print("usage: tokenguard-fuzz TARGET [libFuzzer options] [CORPUS...] | tokenguard-fuzz --list")
        return 2
    }
    let name = String(cString: first)
    if name == "--list" {
        for target in allTargets { print("\(target.name)\t\(target.summary)") }
        return 0
    }
    guard let target = allTargets.first(where: { $0.name == name }) else {
        print("unknown fuzz target \(name); --list names them")
        return 2
    }
    selectedTarget = target
    #if TOKENGUARD_FUZZ
        // Drop the target name: libFuzzer sees `program [options] [corpus...]`.
        var arguments: [UnsafeMutablePointer<CChar>?] = [argv[0]]
        for index in 2..<Int(argc) { arguments.append(argv[index]) }
        arguments.append(nil)
        var count = CInt(arguments.count - 1)
        return arguments.withUnsafeMutableBufferPointer { buffer in
            var vector: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
            return LLVMFuzzerRunDriver(&count, &vector, testOneInput)
        }
    #else
        var replayed = 0
        for index in 2..<Int(argc) {
            guard let path = argv[index].map({ String(cString: $0) }), let data = FileManager.default.contents(atPath: path) else {
                print("cannot read \(index < argc ? String(cString: argv[index]!) : "")")
                return 2
            }
            target.run(Array(data))
            replayed += 1
        }
        print("\(target.name): \(replayed) inputs replayed, every property held")
        return 0
    #endif
}
