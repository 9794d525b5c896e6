package outputs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Record is one listed output file.
type Record struct {
	Path   string // relative to the outputs root, '/'-separated
	Size   int64
	SHA256 string // 64 lowercase hex digits
}

// ListingError says which record of a listing was refused and why. It wraps
// ErrUnsafeOutput or, for a limit, ErrQuota.
type ListingError struct {
	Record int    // 0-based; -1 when the listing as a whole is refused
	Path   string // the record's path as listed, if known
	Reason string
	Err    error
}

func (e *ListingError) Error() string {
	if e.Record < 0 {
		return fmt.Sprintf("%v: listing %s", e.Err, e.Reason)
	}
	return fmt.Sprintf("%v: record %d %q: %s", e.Err, e.Record, e.Path, e.Reason)
}

func (e *ListingError) Unwrap() error { return e.Err }

// listingScript lists regular files only: find does not follow symlinks and
// -type f leaves out links, devices, FIFOs and sockets. Limits are checked
// before anything is hashed, so an oversized tree costs no hashing. Sizes come
// from one batched stat and checksums from batched sha256sum runs; a name
// sha256sum would escape in its output (control characters, backslash) is
// hashed on its own from stdin instead. Background processes of the script
// (process substitutions) are waited for so that a failing find, stat or
// sha256sum fails the listing rather than shortening it.
const listingScript = `set -u -o pipefail
export LC_ALL=C
root=$1 max_files=$2 max_file_bytes=$3 max_bytes=$4
quota() { printf 'session outputs exceed limits: %s\n' "$1" >&2; exit 42; }
fail() { printf 'session output listing failed: %s\n' "$1" >&2; exit 1; }
if [ -L "$root" ]; then fail "outputs root is a symlink"; fi
if [ ! -e "$root" ]; then exit 0; fi
cd -- "$root" || fail "cannot enter outputs root"
mapfile -d '' files < <(find . -type f -print0 | sort -z)
wait $! || fail "cannot enumerate outputs"
n=${#files[@]}
if (( n > max_files )); then quota "more than $max_files files"; fi
if (( n == 0 )); then exit 0; fi
mapfile -t sizes < <(printf '%s\0' "${files[@]}" | xargs -0 stat -c %s --)
wait $! || fail "cannot stat outputs"
if (( ${#sizes[@]} != n )); then fail "stat output does not match the file list"; fi
total=0
for i in "${!files[@]}"; do
  size=${sizes[i]}
  [[ $size =~ ^[0-9]+$ ]] || fail "bad size from stat"
  if (( size > max_file_bytes )); then
    quota "$(printf '%q' "${files[i]#./}") has $size bytes, more than $max_file_bytes"
  fi
  total=$(( total + size ))
  if (( total > max_bytes )); then quota "more than $max_bytes bytes in all"; fi
done
sums=() batch=() slots=()
for i in "${!files[@]}"; do
  f=${files[i]}
  case $f in
  *[[:cntrl:]\\]*)
    sum=$(sha256sum < "$f") || fail "cannot hash $(printf '%q' "${f#./}")"
    sums[i]=${sum:0:64} ;;
  *)
    batch+=("$f")
    slots+=("$i") ;;
  esac
done
if (( ${#batch[@]} > 0 )); then
  mapfile -t lines < <(printf '%s\0' "${batch[@]}" | xargs -0 sha256sum --)
  wait $! || fail "cannot hash outputs"
  if (( ${#lines[@]} != ${#batch[@]} )); then fail "sha256sum output does not match the file list"; fi
  for k in "${!batch[@]}"; do sums[slots[k]]=${lines[k]:0:64}; done
fi
for i in "${!files[@]}"; do
  printf '%s\0%s\0%s\0' "${files[i]#./}" "${sizes[i]}" "${sums[i]}"
done
`

// ListingScript lists the regular files under root as NUL-separated
// `relpath\0size\0sha256\0` records in byte order. A missing root lists
// nothing. Over a limit the script writes which one to stderr and exits with
// QuotaExitCode; the caller turns that into NewQuotaError(stderr).
func ListingScript(root string, l Limits) (string, []string) {
	l = l.normalized()
	return listingScript, []string{
		root,
		strconv.Itoa(l.MaxFiles),
		strconv.FormatInt(l.MaxFileBytes, 10),
		strconv.FormatInt(l.MaxBytes, 10),
	}
}

// ParseListing validates a listing produced by ListingScript. It accepts only
// safe relative paths (see SafeJoin), canonical decimal sizes within l,
// 64-digit hex checksums (returned in lowercase), complete records, and
// unique paths none of which is also a parent directory of another. Errors
// are *ListingError values.
func ParseListing(data []byte, l Limits) ([]Record, error) {
	l = l.normalized()
	if len(data) == 0 {
		return []Record{}, nil
	}
	whole := func(err error, reason string) error {
		return &ListingError{Record: -1, Reason: reason, Err: err}
	}
	if data[len(data)-1] != 0 {
		return nil, whole(ErrUnsafeOutput, "does not end with NUL")
	}
	fields := bytes.Count(data, []byte{0})
	if fields%3 != 0 {
		return nil, whole(ErrUnsafeOutput, fmt.Sprintf("has %d fields, not a multiple of 3", fields))
	}
	if fields/3 > l.MaxFiles {
		return nil, whole(ErrQuota, fmt.Sprintf("has more than %d files", l.MaxFiles))
	}
	records := make([]Record, 0, fields/3)
	seen := make(map[string]bool, fields/3)
	var total int64
	rest := data
	next := func() string {
		i := bytes.IndexByte(rest, 0)
		f := string(rest[:i])
		rest = rest[i+1:]
		return f
	}
	for i := 0; len(rest) > 0; i++ {
		path, sizeText, sum := next(), next(), next()
		refuse := func(err error, reason string) error {
			return &ListingError{Record: i, Path: path, Reason: reason, Err: err}
		}
		if reason := checkPath(path); reason != "" {
			return nil, refuse(ErrUnsafeOutput, reason)
		}
		if seen[path] {
			return nil, refuse(ErrUnsafeOutput, "duplicate path")
		}
		seen[path] = true
		size, ok := parseSize(sizeText)
		if !ok {
			return nil, refuse(ErrUnsafeOutput, fmt.Sprintf("invalid size %q", sizeText))
		}
		if size > l.MaxFileBytes {
			return nil, refuse(ErrQuota, fmt.Sprintf("%d bytes, more than %d", size, l.MaxFileBytes))
		}
		if size > l.MaxBytes-total {
			return nil, refuse(ErrQuota, fmt.Sprintf("more than %d bytes in all", l.MaxBytes))
		}
		total += size
		if !isHex64(sum) {
			return nil, refuse(ErrUnsafeOutput, fmt.Sprintf("invalid sha256 %q", sum))
		}
		records = append(records, Record{Path: path, Size: size, SHA256: strings.ToLower(sum)})
	}
	// A path that is also another's parent cannot come from a real tree and
	// would make writing the files out fail halfway.
	for i, r := range records {
		for j := strings.IndexByte(r.Path, '/'); j >= 0; j = nextSlash(r.Path, j) {
			if seen[r.Path[:j]] {
				return nil, &ListingError{Record: i, Path: r.Path, Reason: fmt.Sprintf("parent %q is listed as a file", r.Path[:j]), Err: ErrUnsafeOutput}
			}
		}
	}
	return records, nil
}

func nextSlash(s string, after int) int {
	k := strings.IndexByte(s[after+1:], '/')
	if k < 0 {
		return -1
	}
	return after + 1 + k
}

// parseSize accepts only what stat prints: decimal digits, no sign, no
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
