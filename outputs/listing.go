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
// prints something the agent's listing never would. It wraps ErrUnsafeOutput.
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

// ListingArgs are the arguments of the guest agent's outputs-list builtin
// (agentwire.BuiltinOutputsList), which lists the entries under root for
// ParseListing under the same policy: root, the three limits, how many
// refusals to name, the number of denied names, the denied names, then the
// allowed paths. A missing root lists nothing.
func ListingArgs(root string, p Policy) []string {
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
	return append(args, p.Allow...)
}

// ParseListing validates a listing made with ListingArgs and decides,
// entry by entry and in order, what to fetch: a regular file with one link,
// a safe path (see SafeJoin), not denied by p, within p's limits and listed
// with its sha256. Every other entry is refused with its reason. It refuses
// the whole listing (a *ListingError) only when it is malformed: fields the
// guest never prints, entries out of byte order or repeated, a path listed
// below another non-directory entry, more entries than the guest may name.
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

// typeReason names a non-regular entry by its type letter (find's %y).
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

// parseSize accepts only what the listing prints: decimal digits, no sign, no
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
