// Package outputs collects the files an agent leaves in a session's outputs
// directory. It builds the arguments of the guest agent's listing and parses
// what comes back; the guest is untrusted, so every listed path, size and
// checksum is validated before it reaches the host, and every fetched file is
// checked against its listing while it streams.
package outputs

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Default limits on what one collection may return.
const (
	DefaultMaxFiles     = 100
	DefaultMaxFileBytes = 25 << 20
	DefaultMaxBytes     = 100 << 20
)

// Path limits. Linux refuses longer names anyway; the host checks again
// because the listing comes from the guest.
const (
	MaxSegmentBytes = 255
	MaxPathBytes    = 4096
)

// Limits bound one collection. A zero or negative field means its default.
type Limits struct {
	MaxFiles     int
	MaxFileBytes int64
	MaxBytes     int64
}

// DefaultLimits are the limits of the outputs contract: 100 files, 25 MiB per
// file, 100 MiB in all.
var DefaultLimits = Limits{
	MaxFiles:     DefaultMaxFiles,
	MaxFileBytes: DefaultMaxFileBytes,
	MaxBytes:     DefaultMaxBytes,
}

func (l Limits) normalized() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l
}

// maxRecordBytes is the longest record a valid listing can hold: path, a
// type letter, a link count, a size, a checksum and five NULs.
const maxRecordBytes = MaxPathBytes + 1 + 19 + 19 + 64 + 5

// MaxListingBytes is the largest listing ParseListing can accept under l, so
// the caller can cap how much of the guest's stdout it reads.
func (l Limits) MaxListingBytes() int64 {
	return int64(l.normalized().MaxFiles+MaxListedRefusals)*maxRecordBytes + 20
}

// Errors callers test with errors.Is.
var (
	// ErrUnsafeOutput: the guest's listing or archive is malformed, or
	// names a path the host must not use.
	ErrUnsafeOutput = errors.New("unsafe session output")
	// ErrSizeMismatch: a fetched file's length differs from its listing.
	ErrSizeMismatch = errors.New("session output size mismatch")
	// ErrChecksum: a fetched file's sha256 differs from its listing.
	ErrChecksum = errors.New("session output checksum mismatch")
)

// checkPath returns why rel is not a safe relative output path, or "".
// Beyond escapes it refuses what could be misread on some host: backslashes
// (a separator on Windows), control characters, C1 ones too (log and header
// injection) and invalid UTF-8 (lossy in JSON).
func checkPath(rel string) string {
	switch {
	case rel == "":
		return "empty path"
	case len(rel) > MaxPathBytes:
		return "path longer than 4096 bytes"
	case !utf8.ValidString(rel):
		return "path is not valid UTF-8"
	case rel[0] == '/':
		return "absolute path"
	}
	for _, r := range rel {
		if r == '\\' {
			return "backslash in path"
		}
		if unicode.IsControl(r) { // C0, DEL and C1 (U+0085 is a line break)
			return "control character in path"
		}
	}
	for seg := range strings.SplitSeq(rel, "/") {
		switch {
		case seg == "":
			return "empty path segment"
		case seg == "." || seg == "..":
			return "'" + seg + "' path segment"
		case len(seg) > MaxSegmentBytes:
			return "path segment longer than 255 bytes"
		}
	}
	return ""
}

// MIMEType is the media type reported for an output file, chosen by its
// extension, case-insensitively.
func MIMEType(name string) string {
	lower := strings.ToLower(name)
	for _, m := range mimeTypes {
		if strings.HasSuffix(lower, m.ext) {
			return m.typ
		}
	}
	return "application/octet-stream"
}

var mimeTypes = []struct{ ext, typ string }{
	{".txt", "text/plain"},
	{".json", "application/json"},
	{".csv", "text/csv"},
	{".html", "text/html"},
	{".htm", "text/html"},
	{".md", "text/markdown"},
	{".pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
	{".png", "image/png"},
	{".jpg", "image/jpeg"},
	{".jpeg", "image/jpeg"},
	{".pdf", "application/pdf"},
}
