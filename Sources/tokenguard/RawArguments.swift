import Foundation

/// The process's arguments as the bytes it was given. `CommandLine.arguments` replaces each byte that is not UTF-8
/// with U+FFFD, so from it a value that really holds U+FFFD cannot be told from one that held such a byte.
enum RawArguments {
    /// Whether the value of the long option `name` (the argument after `name`, or what follows `name=`) is UTF-8 as
    /// given; nil when the option is not there. The first occurrence is read: verify refuses an option given twice,
    /// and a value that reads as one of its options, so the first argument spelling `name` is the option itself.
    static func valueIsUTF8(of name: String) -> Bool? {
        let count = Int(CommandLine.argc)
        let argv = CommandLine.unsafeArgv
        let spelled = Array(name.utf8)
        var index = 1
        while index < count, let pointer = argv[index] {
            let argument = UnsafeRawBufferPointer(start: pointer, count: strlen(pointer))
            if argument.elementsEqual(spelled) {
                guard index + 1 < count, let value = argv[index + 1] else { return nil }
                return isUTF8(UnsafeRawBufferPointer(start: value, count: strlen(value)))
            }
            if argument.count > spelled.count, argument.starts(with: spelled), argument[spelled.count] == UInt8(ascii: "=") {
                return isUTF8(UnsafeRawBufferPointer(rebasing: argument[(spelled.count + 1)...]))
            }
            index += 1
        }
        return nil
    }

    private static func isUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        String(validating: bytes, as: UTF8.self) != nil
    }
}
