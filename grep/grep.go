// Package grep is the guest side of the grep tool: the ripgrep search and
// preflight scripts and the parser for what the search prints. It starts no
// processes; the stream protocol and cleanup are shared with package glob.
package grep

import "github.com/oma-sandbox/oma-sandbox/glob"

// Limits of the grep tool's inputs and output.
const (
	MaxPatternBytes  = 4096
	MaxPathBytes     = 4096
	DefaultHeadLimit = 100
	MaxRawBytes      = 1 << 20
	MaxOutputBytes   = 64 << 10
)

// The grep tool's protocol.
const (
	ReadyMarker = "__OMA_GREP_READY__"
	OwnerEnv    = "OMA_GREP_OWNER"
)

// SearchProtocol is the protocol of SearchScript.
var SearchProtocol = glob.Protocol{Tool: "grep", Marker: ReadyMarker, OwnerEnv: OwnerEnv, Stream: "output"}

// NewToken returns a fresh "oma-grep-<uuid>" ownership token.
func NewToken() string { return glob.NewToken(SearchProtocol.Tool) }

// NewReadinessFilter returns a filter for SearchScript's marker.
func NewReadinessFilter() *glob.ReadinessFilter { return glob.NewReadinessFilter(SearchProtocol) }

// CleanupScript ends the search tagged with token; see glob.CleanupScript.
func CleanupScript(token string) (script string, args []string) {
	return glob.CleanupScript(OwnerEnv, token)
}

// CollectorOptions configure NewCollector.
type CollectorOptions struct {
	// Root is the absolute path given to SearchScript.
	Root string
	// HeadLimit caps the matches silently; 0 means DefaultHeadLimit.
	HeadLimit int
	// Base, when set, makes results relative to it; else they are absolute.
	Base string
	// Match optionally re-checks paths relative to Root on the host.
	Match func(rel string) bool
}

// NewCollector returns a collector for SearchScript's output after the marker.
func NewCollector(opts CollectorOptions) (*glob.Collector, error) {
	return glob.NewCollector(SearchProtocol, glob.CollectorOptions{
		Root:           opts.Root,
		Rooted:         true,
		Match:          opts.Match,
		MaxMatches:     opts.HeadLimit,
		MaxRawBytes:    MaxRawBytes,
		MaxOutputBytes: MaxOutputBytes,
		Base:           opts.Base,
	})
}

// SearchScript lists the files under root whose contents match the ripgrep
// regex pattern, as NUL-terminated paths beginning with root, after the
// readiness marker, in path order (so a capped result is stable).
// ripgrepGlob ("" for none) is passed to --glob; see glob.ToRipgrep. Hidden
// and ignored files are searched. Each hit is re-checked and dropped if it
// contains a NUL byte, because ripgrep reports a binary file whose match
// precedes its first NUL; a hit gone by then is dropped too. The search runs
// in its own session tagged OwnerEnv=token. ripgrep's "no match" status
// counts as success, and so does its status 2 when the pattern is valid and
// root exists: some files could not be read or vanished, and ripgrep's
// complaints about them are on stderr. Any other failure is the script's
// status.
//
// Run it as `/bin/bash -c SCRIPT bash ARGS...`.
func SearchScript(root, token, pattern, ripgrepGlob string) (script string, args []string) {
	const s = OwnerEnv + `="$2" setsid bash -c '
set -u
printf "%s\0" "$1" || exit
root=$2 pattern=$3 glob=$4
text_only() {
	local p code
	while IFS= read -r -d "" p; do
		LC_ALL=C rg --no-config -qaU -- "\\x00" "$p" 2>/dev/null
		code=$?
		case $code in
		0) ;;
		1) printf "%s\0" "$p" || exit ;;
		*) [ ! -e "$p" ] || printf "rg: %s: could not be read again\n" "$p" >&2 ;;
		esac
	done
}
set -- --no-config --hidden --no-ignore --color never --files-with-matches --null --sort path
[ -z "$glob" ] || set -- "$@" --glob "$glob"
LC_ALL=C rg "$@" -- "$pattern" "$root" | text_only
codes=("${PIPESTATUS[@]}")
[ "${codes[1]}" -eq 0 ] || exit "${codes[1]}"
[ "${codes[0]}" -le 1 ] && exit 0
[ "${codes[0]}" -eq 2 ] && [ -e "$root" ] || exit "${codes[0]}"
LC_ALL=C rg --no-config -q -- "$pattern" /dev/null 2>/dev/null
[ "$?" -le 1 ] || exit 2
' bash "$5" "$1" "$3" "$4" &
wait "$!"`
	return s, []string{root, token, pattern, ripgrepGlob, ReadyMarker}
}

// PreflightScript proves, in the current directory, that the guest's rg
// behaves as SearchScript relies on: a match is listed NUL-terminated, no
// match exits 1, an invalid regex exits with another status, hidden and
// ignored files are searched, --glob filters, and the NUL re-check tells
// binary from text. It removes its scratch directory and says on stderr
// which check failed.
func PreflightScript() (script string, args []string) {
	const s = `set -u
fail() { printf 'grep preflight: %s\n' "$1" >&2; exit 1; }
dir=$(mktemp -d .oma-grep-preflight.XXXXXX) || fail 'cannot create scratch directory'
trap 'rm -rf -- "$dir"' EXIT
tree=$dir/tree
mkdir "$tree" &&
	printf 'needle\n' >"$tree/text.txt" &&
	printf 'other\n' >"$tree/none.txt" &&
	printf 'needle\n' >"$tree/.hidden.txt" &&
	printf 'needle\n' >"$tree/ignored.txt" &&
	printf 'ignored.txt\n' >"$tree/.ignore" &&
	printf '\0needle\0tail' >"$dir/binary.bin" || fail 'cannot write scratch files'
search() { LC_ALL=C rg --no-config --hidden --no-ignore --color never --files-with-matches --null "$@"; }
# only PATHS...: the output holds exactly these NUL-terminated paths, in any
# order, and nothing after the last NUL.
only() {
	local p n=0
	while IFS= read -r -d '' p; do
		n=$((n + 1))
		case " $* " in *" $p "*) ;; *) return 1 ;; esac
	done <"$dir/out"
	[ -z "$p" ] && [ "$n" -eq "$#" ]
}
search -- needle "$tree/text.txt" >"$dir/out"; code=$?
[ "$code" -eq 0 ] && only "$tree/text.txt" || fail 'a match is not listed as one NUL-terminated path'
search -- needle "$tree/none.txt" >"$dir/out" 2>/dev/null; code=$?
[ "$code" -eq 1 ] || fail "no match exits $code, not 1"
search -- '[' "$tree/text.txt" >"$dir/out" 2>/dev/null; code=$?
[ "$code" -gt 1 ] || fail "an invalid regex exits $code"
search -- needle "$tree" >"$dir/out"; code=$?
[ "$code" -eq 0 ] && only "$tree/text.txt" "$tree/.hidden.txt" "$tree/ignored.txt" ||
	fail 'a directory search does not list exactly the hidden, ignored and plain matches'
search --glob '**/t*.txt' -- needle "$tree" >"$dir/out"; code=$?
[ "$code" -eq 0 ] && only "$tree/text.txt" || fail 'a search does not honour --glob'
LC_ALL=C rg --no-config -qaU -- '\x00' "$dir/binary.bin"; code=$?
[ "$code" -eq 0 ] || fail "NUL detection in a binary file exits $code"
LC_ALL=C rg --no-config -qaU -- '\x00' "$tree/text.txt"; code=$?
[ "$code" -eq 1 ] || fail "NUL detection in a text file exits $code"
exit 0`
	return s, nil
}
