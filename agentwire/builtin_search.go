package agentwire

// The search tools' builtins, each doing the work of the guest script named
// beside it.
const (
	BuiltinGlobEnumerate = "glob-enumerate" // glob.NarrowedEnumerationScript
	BuiltinGrepSearch    = "grep-search"    // grep.SearchScript
	BuiltinSearchKill    = "search-kill"    // glob.CleanupScript (grep.CleanupScript too)
)
