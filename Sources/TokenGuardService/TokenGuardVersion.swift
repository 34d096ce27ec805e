import TokenGuardCore

public enum TokenGuardVersion { public static let string = "0.2.0" }
