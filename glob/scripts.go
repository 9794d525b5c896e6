package glob

import "github.com/google/uuid"

// NewToken returns a fresh ownership token for one tool call, such as
// "oma-glob-<uuid>" for kind "glob".
func NewToken(kind string) string { return "oma-" + kind + "-" + uuid.NewString() }

// EnumerationScript lists the regular files under root as NUL-terminated
// "./"-relative paths, after the readiness marker. find does the listing in
// its own session, tagged OwnerEnv=token, and prints the marker itself when
// it visits root, so CleanupScript can end all work that follows readiness.
// A missing root is an ordinary failure after readiness (exit 3): there is
// no work then, and the shell prints the marker and the message. find does
// not follow symbolic links, so the listing stays inside root. A directory
// that cannot be read, or that vanishes during the walk, does not fail the
// listing: find's complaints go to stderr and the status is 0; any other
// failure of find is the script's status.
//
// Run it as `/bin/bash -c SCRIPT bash ARGS...`.
func EnumerationScript(root, token string) (script string, args []string) {
	return NarrowedEnumerationScript(root, token, Narrowing{})
}

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

// NarrowedEnumerationScript is EnumerationScript listing only the files n
// lets through.
func NarrowedEnumerationScript(root, token string, n Narrowing) (script string, args []string) {
	// One shell and one find: the shell enters root and builds find's
	// arguments; the background job is not a process group leader, so
	// setsid detaches it in place instead of forking, and wait returns its
	// status. find visits "." before anything below it, so the marker
	// its -printf prints there precedes every path; the marker holds no "%" or
	// backslash for -printf to interpret.
	const s = `cd -- "$2" 2>/dev/null || {
	printf "%s\\0" "$3" || exit
	printf "Path not found: %s\\n" "$2" >&2
	exit 3
}
prune=() name=() under=()
[ "$4" != 1 ] || prune=(-type d -name .git -prune -o)
[ -z "$5" ] || name=(-name "$5")
[ -z "$6" ] || under=(-path "*/$6/*")
` + OwnerEnv + `="$1" LC_ALL=C setsid find . -path . -printf "$3\\0" -o "${prune[@]}" -type f "${name[@]}" "${under[@]}" -print0 &
wait "$!"
code=$?
[ "$code" -le 1 ] || exit "$code"`
	skipGit := "0"
	if n.SkipGit {
		skipGit = "1"
	}
	return s, []string{token, root, ReadyMarker, skipGit, n.Name, n.Under}
}

// CleanupScript kills exactly the processes whose environment holds
// envName=token, with their process groups, and waits two to three seconds
// at most for them to be gone, scanning again for new tagged processes. A process is signalled only if its start time
// (field 22 of /proc/PID/stat) and its tag are unchanged since it was found,
// so a reused pid is left alone. It exits 1 if tagged processes remain.
func CleanupScript(envName, token string) (script string, args []string) {
	const s = `want="$1=$2"
# start_of PID sets start to the process's start time; it fails for a
# process that is gone or a zombie.
start_of() {
	local stat
	IFS= read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	# comm (field 2) may hold spaces and parentheses: fields after the
	# last ") " are state (3) onwards, so start time (22) is the 20th.
	set -- ${stat##*) }
	[ "$#" -ge 20 ] && [ "$1" != Z ] || return 1
	start=${20}
}
has_tag() {
	local e
	while IFS= read -r -d '' e; do
		[ "$e" = "$want" ] && return 0
	done 2>/dev/null <"/proc/$1/environ"
	return 1
}
# same PID START: still the process that was found, and still tagged.
same() {
	start_of "$1" && [ "$start" = "$2" ] && has_tag "$1" && start_of "$1" && [ "$start" = "$2" ]
}
scan() {
	found=''
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		start_of "$pid" || continue
		first=$start
		if same "$pid" "$first"; then found="$found $pid:$first"; fi
	done
}
SECONDS=0
scan
while [ -n "$found" ]; do
	for entry in $found; do
		pid=${entry%%:*}
		if same "$pid" "${entry#*:}"; then
			kill -KILL -- "-$pid" 2>/dev/null
			kill -KILL -- "$pid" 2>/dev/null
		fi
	done
	# SECONDS counts whole seconds, so this gives up after two to three.
	if [ "$SECONDS" -ge 3 ]; then
		printf 'processes tagged %s remain:%s\n' "$1" "$found" >&2
		exit 1
	fi
	sleep 0.05
	scan
done
exit 0`
	return s, []string{envName, token}
}
