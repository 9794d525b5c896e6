package agentwire

import "slices"

// builtins are the names every agent of this version offers in its hello
// (guestagent's tests hold its list to this one).
var builtins = []string{
	BuiltinBashKill, BuiltinBashSupervisor, BuiltinCat, BuiltinExtract,
	BuiltinGlobEnumerate, BuiltinGrepPreflight, BuiltinGrepSearch, BuiltinLs,
	BuiltinOutputsFetch, BuiltinOutputsList, BuiltinPrepare, BuiltinRead,
	BuiltinSearchKill, BuiltinWrite,
}

// IsBuiltin tells whether name is a builtin of this version.
func IsBuiltin(name string) bool { return slices.Contains(builtins, name) }

// Lacking returns the builtins of this version that offered does not
// name: an agent whose hello lacks any is older than this program.
// Lacking(nil) is every one.
func Lacking(offered []string) []string {
	var missing []string
	for _, name := range builtins {
		if !slices.Contains(offered, name) {
			missing = append(missing, name)
		}
	}
	return missing
}
