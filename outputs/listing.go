package outputs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Record is one listed output file the host will fetch.
type Record struct {
	Path   string // relative to the outputs root, '/'-separated
	Size   int64
	SHA256 string // 64 lowercase hex digits
}

// Refusal is an output entry that is not collected, and why.
type Refusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Listing is a parsed listing: the files to fetch, in listing order, and the
// entries refused, each with its reason.
type Listing struct {
	Records []Record
	Refused []Refusal
	// Unlisted counts entries the guest refused without naming them: those
	// past the first MaxListedRefusals, and paths longer than MaxPathBytes.
	Unlisted int
}

// MaxListedRefusals bounds how many refused entries the guest names; the
// rest are only counted, so a tree of 40,000 symlinks costs a bounded listing.
const MaxListedRefusals = 100

// ListingError says why a listing was refused as a whole: a guest that
// prints something the listing script never would. It wraps ErrUnsafeOutput.
type ListingError struct {
	Record int    // 0-based; -1 when the listing as a whole is refused
	Path   string // the record's path as listed, if known
	Reason string
}

func (e *ListingError) Error() string {
	if e.Record < 0 {
		return fmt.Sprintf("%v: listing %s", ErrUnsafeOutput, e.Reason)
	}
	return fmt.Sprintf("%v: record %d %q: %s", ErrUnsafeOutput, e.Record, e.Path, e.Reason)
}

func (e *ListingError) Unwrap() error { return ErrUnsafeOutput }

// listingScript lists every non-directory entry under the outputs root, in
// byte order, without following symlinks (find -P). It classifies each the
// way ParseListing does — an unsafe name, a type other than a regular file,
// a hard link, a denied path, a limit — and hashes only the files that pass,
// so an oversized or hostile tree costs no hashing. A directory the agent
// made unreadable is listed as such instead of failing the walk. The output
// is the number of unnamed refusals, then per entry
// `path\0type\0links\0size\0sha256\0` with an empty sha256 for a refused
// entry. A failing find, sort or sha256sum fails the listing rather than
// shortening it.
const listingScript = `set -u -o pipefail
export LC_ALL=C
root=$1 max_files=$2 max_file_bytes=$3 max_bytes=$4 max_refused=$5 ndeny=$6
shift 6
declare -A deny=()
for ((k = 0; k < ndeny; k++)); do deny[$1]=1; shift; done
allow=("$@")
fail() { printf 'session output listing failed: %s\n' "$1" >&2; exit 1; }
if [ -L "$root" ]; then fail "outputs root is a symlink"; fi
if [ ! -e "$root" ]; then printf '0\0'; exit 0; fi
cd -- "$root" || fail "cannot enter outputs root"
mapfile -d '' entries < <(find -P . -mindepth 1 \
  \( -type d \( ! -readable -o ! -executable \) -printf 'd 1 0 %P\0' -prune \) -o \
  \( ! -type d -printf '%y %n %s %P\0' \) | sort -z -t ' ' -k 4)
wait $! || fail "cannot enumerate outputs"
denied() {
  local p=$1 a rest seg
  for a in "${allow[@]}"; do
    if [[ $p == "$a" || $p == "$a"/* ]]; then return 1; fi
  done
  rest=$p
  while :; do
    seg=${rest%%/*}
    seg=${seg,,}
    if [[ $seg != *[!a-z0-9._-]* && -n ${deny[$seg]-} ]]; then return 0; fi
    [[ $rest == */* ]] || return 1
    rest=${rest#*/}
  done
}
paths=() types=() links=() sizes=() sums=() batch=() slots=()
files=0 bytes=0 named=0 unnamed=0
for idx in "${!entries[@]}"; do
  if (( files >= max_files && named >= max_refused )); then
    unnamed=$((unnamed + ${#entries[@]} - idx))
    break
  fi
  e=${entries[idx]}
  y=${e%% *} e=${e#* }
  n=${e%% *} e=${e#* }
  s=${e%% *} p=${e#* }
  ok=1
  case $p in *[[:cntrl:]\\]*) ok=0 ;; esac
  if (( ok && ${#p} > 4096 )); then ok=0; fi
  if [[ $ok == 1 && ( $y != f || $n != 1 ) ]]; then ok=0; fi
  if (( ok )) && denied "$p"; then ok=0; fi
  if (( ok && (s > max_file_bytes || files >= max_files || s > max_bytes - bytes) )); then ok=0; fi
  if (( ok )); then
    files=$((files + 1)) bytes=$((bytes + s))
    slots+=("${#paths[@]}") batch+=("$p")
  elif (( named >= max_refused || ${#p} > 4096 )); then
    unnamed=$((unnamed + 1))
    continue
  else
    named=$((named + 1))
  fi
  paths+=("$p") types+=("$y") links+=("$n") sizes+=("$s") sums+=("")
done
if (( ${#batch[@]} > 0 )); then
  mapfile -t lines < <(printf '%s\0' "${batch[@]}" | xargs -0 sha256sum --)
  wait $! || fail "cannot hash outputs"
  if (( ${#lines[@]} != ${#batch[@]} )); then fail "sha256sum output does not match the file list"; fi
  for k in "${!batch[@]}"; do sums[slots[k]]=${lines[k]:0:64}; done
fi
printf '%s\0' "$unnamed"
for i in "${!paths[@]}"; do
  printf '%s\0%s\0%s\0%s\0%s\0' "${paths[i]}" "${types[i]}" "${links[i]}" "${sizes[i]}" "${sums[i]}"
done
`

// ListingScript lists the entries under root for ParseListing under the same
// policy. A missing root lists nothing.
func ListingScript(root string, p Policy) (string, []string) {
	l := p.Limits.normalized()
	args := []string{
		root,
		strconv.Itoa(l.MaxFiles),
		strconv.FormatInt(l.MaxFileBytes, 10),
		strconv.FormatInt(l.MaxBytes, 10),
		strconv.Itoa(MaxListedRefusals),
		strconv.Itoa(len(deniedNames)),
	}
	args = append(args, deniedNames...)
	return listingScript, append(args, p.Allow...)
}

// ParseListing validates a listing produced by ListingScript and decides,
// entry by entry and in order, what to fetch: a regular file with one link,
// a safe path (see SafeJoin), not denied by p, within p's limits and listed
// with its sha256. Every other entry is refused with its reason. It refuses
// the whole listing (a *ListingError) only when it is malformed: fields the
// script never prints, entries out of byte order or repeated, a path listed
// below another non-directory entry, more entries than the script names.
func ParseListing(data []byte, p Policy) (*Listing, error) {
	l := p.Limits.normalized()
	whole := func(reason string) error { return &ListingError{Record: -1, Reason: reason} }
	if len(data) == 0 || data[len(data)-1] != 0 {
		return nil, whole("does not end with NUL")
	}
	fields := bytes.Count(data, []byte{0})
	if (fields-1)%5 != 0 {
		return nil, whole(fmt.Sprintf("has %d fields, not a count and records of 5", fields))
	}
	n := (fields - 1) / 5
	if n > l.MaxFiles+MaxListedRefusals {
		return nil, whole(fmt.Sprintf("names %d entries, more than %d", n, l.MaxFiles+MaxListedRefusals))
	}
	rest := data
	next := func() string {
		i := bytes.IndexByte(rest, 0)
		f := string(rest[:i])
		rest = rest[i+1:]
		return f
	}
	unlisted, ok := parseSize(next())
	if !ok || unlisted > 1<<40 {
		return nil, whole("has an invalid count of unnamed entries")
	}
	out := &Listing{Records: []Record{}, Refused: []Refusal{}, Unlisted: int(unlisted)}
	listed := make(map[string]bool, n)
	var files int
	var total int64
	prev := ""
	for i := range n {
		path, typ, linkText, sizeText, sum := next(), next(), next(), next(), next()
		bad := func(reason string) error { return &ListingError{Record: i, Path: path, Reason: reason} }
		if i > 0 && path <= prev {
			return nil, bad("out of byte order or repeated")
		}
		prev = path
		if len(typ) != 1 {
			return nil, bad(fmt.Sprintf("invalid type %q", typ))
		}
		links, ok := parseSize(linkText)
		if !ok || links == 0 {
			return nil, bad(fmt.Sprintf("invalid link count %q", linkText))
		}
		size, ok := parseSize(sizeText)
		if !ok {
			return nil, bad(fmt.Sprintf("invalid size %q", sizeText))
		}
		if sum != "" && !isHex64(sum) {
			return nil, bad(fmt.Sprintf("invalid sha256 %q", sum))
		}
		listed[path] = true
		reason := ""
		switch {
		case checkPath(path) != "":
			reason = "unsafe name: " + checkPath(path)
		case typ != "f":
			reason = typeReason(typ[0])
		case links != 1:
			reason = fmt.Sprintf("a hard link (%d names for one file)", links)
		case p.denied(path) != "":
			reason = p.denied(path)
		case size > l.MaxFileBytes:
			reason = fmt.Sprintf("%d bytes, more than the limit of %d per file", size, l.MaxFileBytes)
		case files >= l.MaxFiles:
			reason = fmt.Sprintf("more than %d files", l.MaxFiles)
		case size > l.MaxBytes-total:
			reason = fmt.Sprintf("%d bytes would pass the limit of %d in all", size, l.MaxBytes)
		case sum == "":
			reason = "listed without a sha256"
		}
		if reason != "" {
			out.Refused = append(out.Refused, Refusal{Path: path, Reason: reason})
			continue
		}
		files++
		total += size
		out.Records = append(out.Records, Record{Path: path, Size: size, SHA256: strings.ToLower(sum)})
	}
	// A path below another listed entry (never a directory) cannot come from
	// a real tree and would make writing the files out fail halfway.
	for i, r := range out.Records {
		for j := strings.IndexByte(r.Path, '/'); j >= 0; j = nextSlash(r.Path, j) {
			if listed[r.Path[:j]] {
				return nil, &ListingError{Record: i, Path: r.Path, Reason: fmt.Sprintf("parent %q is listed as a file", r.Path[:j])}
			}
		}
	}
	return out, nil
}

// typeReason names a non-regular entry by find's %y letter.
func typeReason(y byte) string {
	switch y {
	case 'l':
		return "a symbolic link (not followed)"
	case 'd':
		return "a directory that cannot be read; its contents were not listed"
	case 'p':
		return "a named pipe"
	case 's':
		return "a socket"
	case 'b', 'c':
		return "a device"
	}
	return "not a regular file"
}

func nextSlash(s string, after int) int {
	k := strings.IndexByte(s[after+1:], '/')
	if k < 0 {
		return -1
	}
	return after + 1 + k
}

// parseSize accepts only what find prints: decimal digits, no sign, no
// leading zeros.
func parseSize(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
