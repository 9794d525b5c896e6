package agentwire

// The search tools' builtins, each given the arguments the function beside
// it builds.
const (
	BuiltinGlobEnumerate = "glob-enumerate" // glob.EnumerationArgs
	BuiltinGrepSearch    = "grep-search"    // grep.SearchArgs
	BuiltinSearchKill    = "search-kill"    // glob.CleanupArgs (grep.CleanupArgs too)
	BuiltinGrepPreflight = "grep-preflight" // args a directory to check ripgrep in
)
