package glob

import "github.com/google/uuid"

// NewToken returns a fresh ownership token for one tool call, such as
// "oma-glob-<uuid>" for kind "glob".
func NewToken(kind string) string { return "oma-" + kind + "-" + uuid.NewString() }

// Narrowing lets the guest skip files that cannot match, so that a large
// tree fits the enumeration's byte limit. It only ever removes non-matches
// (see (*Pattern).Narrowing), and the host still checks every path.
type Narrowing struct {
	// SkipGit leaves out the insides of .git directories.
	SkipGit bool
	// Name, when set, is a pattern every match's base name fits: literal
	// bytes and '*', which stands for any run of them.
	Name string
	// Under, when set, is a plain relative directory path ("calc" or
	// "src/pkg") that every match lies below, at any depth.
	Under string
}

// EnumerationArgs are the arguments of the guest agent's glob-enumerate
// builtin (agentwire.BuiltinGlobEnumerate), which lists the regular files
// under root that n lets through as NUL-terminated "./"-relative paths,
// after the readiness marker, in the order find would (each directory's
// entries as it lists them). The agent walks the tree itself, starting no
// process, so CleanupArgs' kill finds nothing of it to end: the call's own
// kill and timer end the walk. A root that cannot be entered is an ordinary
// failure after readiness (exit 3, "Path not found"). No symbolic link
// below root is followed, so the listing stays inside it. A directory that
// cannot be read, or that vanishes during the walk, does not fail the
// listing: it is named on stderr as find names it, and the status is 0.
// token is kept for agents that still start find.
func EnumerationArgs(root, token string, n Narrowing) []string {
	skipGit := "0"
	if n.SkipGit {
		skipGit = "1"
	}
	return []string{token, root, ReadyMarker, skipGit, n.Name, n.Under}
}

// CleanupArgs are the arguments of the guest agent's search-kill builtin
// (agentwire.BuiltinSearchKill), which kills exactly the processes whose
// environment holds envName=token, with their process groups, scanning
// again for new tagged processes, for at most two and a half seconds. A
// process is signalled only while its start time is unchanged since it was
// found, so a reused pid is left alone. It exits 1, naming them, if tagged
// processes remain.
func CleanupArgs(envName, token string) []string { return []string{envName, token} }
