package agentwire

import (
	"slices"
	"strconv"
)

// builtins are the names every agent of this version offers in its hello
// (guestagent's tests hold its list to this one).
var builtins = []string{
	BuiltinBashKill, BuiltinBashSupervisor, BuiltinCat, BuiltinExtract,
	BuiltinGlobEnumerate, BuiltinGrepPreflight, BuiltinGrepSearch, BuiltinLs,
	BuiltinOutputsFetch, BuiltinOutputsList, BuiltinPrepare, BuiltinRead,
	BuiltinSearchKill, BuiltinStandbyEnd, BuiltinWrite,
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

// RevisionOption, given to `oma-guest-agent builtin` before the builtin's
// name, asks the agent to refuse the call when it is older than this
// program's revision: its answer is then OlderThanRevision's line. An agent
// from before revisions answers it as a builtin it does not have.
func RevisionOption() string { return "--revision=" + strconv.Itoa(Revision) }

// OlderThanRevision is the stderr (exit status 2) of an agent asked by
// RevisionOption for revision n, when its own is lower.
func OlderThanRevision(n int) string {
	return "oma-guest-agent: older than revision " + strconv.Itoa(n) + "\n"
}
