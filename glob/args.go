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
	// Name, when set, is a find -name pattern every match's base name fits.
	Name string
	// Under, when set, is a plain relative directory path ("calc" or
	// "src/pkg") that every match lies below, at any depth.
	Under string
}

// EnumerationArgs are the arguments of the guest agent's glob-enumerate
// builtin (agentwire.BuiltinGlobEnumerate), which lists the regular files
// under root that n lets through as NUL-terminated "./"-relative paths,
// after the readiness marker. Its find runs in a session of its own, tagged
// OwnerEnv=token, and prints the marker itself when it visits root, so that
// CleanupArgs' kill ends all work that follows readiness. A root that
// cannot be entered is an ordinary failure after readiness (exit 3, "Path
// not found"): there is no work then. find follows no symbolic link, so the
// listing stays inside root. A directory that cannot be read, or that
// vanishes during the walk, does not fail the listing: find's complaints go
// to stderr and the status is 0; any other failure of find is the
// builtin's status.
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
