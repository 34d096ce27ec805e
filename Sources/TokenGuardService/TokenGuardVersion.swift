import TokenGuardCore

package enum TokenGuardVersion { package static let string = "0.2.0" }
