import ArgumentParser

/// `verify`'s arguments made unambiguous before ArgumentParser reads them. verify's exit status 0 means "valid", so
/// no value a caller passes on (a token, an app's nonce) may be read as anything but that value:
///
/// - `--token VALUE` and `--nonce VALUE` are joined into `--token=VALUE`: ArgumentParser looks for its own flags
///   (`--help`, `--generate-completion-script`) among all arguments before it parses, and answered a nonce of
///   `--generate-completion-script` with a completion script and exit 0 (red team round 14); it also refused a value
///   starting with `---` as an invalid option.
/// - An option given twice is refused: with the last one kept, a refused value before it was hidden
///   (`--nonce --explain --nonce N`, red team round 13).
/// - ArgumentParser's command-wide flags that answer instead of running (`--generate-completion-script`,
///   `--experimental-dump-help`) are refused anywhere but first, for every command.
enum VerifyArguments {
    /// verify's own options, and ArgumentParser's flags that answer without running the command.
    static let optionNames = [
        "--config", "--at", "--provider", "--token", "--nonce", "--explain", "--help", "-h", "--help-hidden", "--version",
        "--generate-completion-script", "--experimental-dump-help",
    ]
    static let answeringFlags = ["--generate-completion-script", "--experimental-dump-help"]
    /// verify's options that take no value.
    static let flags = ["--explain", "--help", "-h", "--help-hidden", "--version"]

    /// The option a value reads as (compared as bytes), if any: `--` itself, a name, or a name with `=` and a value.
    static func optionRead(in value: String) -> String? {
        let bytes = value.utf8
        if bytes.elementsEqual("--".utf8) { return "--" }
        let name = bytes.prefix { $0 != UInt8(ascii: "=") }
        return optionNames.first { $0.utf8.elementsEqual(name) }
    }

    /// The arguments (without the program's name) as ArgumentParser is to read them.
    static func prepare(_ arguments: [String]) throws -> [String] {
        for argument in arguments.dropFirst() {
            if let option = optionRead(in: argument), answeringFlags.contains(option) {
                throw ValidationError("\(option) is tokenguard's own flag: give it first (tokenguard \(option) SHELL)")
            }
        }
        guard let command = arguments.first, command.utf8.elementsEqual("verify".utf8) else { return arguments }
        var prepared = [command]
        var seen: [String] = []
        var index = 1
        while index < arguments.count {
            let argument = arguments[index]
            // After the end of options, everything is an operand (verify takes none: ArgumentParser refuses them).
            if argument.utf8.elementsEqual("--".utf8) {
                prepared.append(contentsOf: arguments[index...])
                break
            }
            // Flags that answer without a verdict (help, version) must not be reachable but as written: `-hh` (help
            // twice) and `--help=x` printed help with exit 0, the code for "valid" (red team round 15).
            if argument.utf8.count > 2, argument.utf8.first == UInt8(ascii: "-"), argument.utf8.dropFirst().first != UInt8(ascii: "-") {
                throw ValidationError("an argument starting with a single '-' and longer than -h is not an option of verify's")
            }
            if let option = optionRead(in: argument), option != "--" {
                if flags.contains(option), argument.utf8.count != option.utf8.count { throw ValidationError("\(option) takes no value") }
                // `-h` and `--help` are one flag.
                let name = option == "-h" ? "--help" : option
                if seen.contains(name) { throw ValidationError("\(name) is given twice; give it once") }
                seen.append(name)
                let joinsValue = (name == "--token" || name == "--nonce") && argument.utf8.count == name.utf8.count
                if joinsValue, index + 1 < arguments.count {
                    prepared.append(argument + "=" + arguments[index + 1])
                    index += 2
                    continue
                }
            }
            prepared.append(argument)
            index += 1
        }
        return prepared
    }
}
