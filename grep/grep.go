// Package grep is the guest side of the grep tool: the arguments of the
// guest agent's ripgrep search, the preflight script that proves a guest's
// rg behaves as the search relies on, and the parser for what the search
// prints. It starts no processes; the stream protocol and cleanup are
// shared with package glob.
package grep

import (
	"bytes"

	"github.com/oma-sandbox/oma-sandbox/glob"
)

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

// SearchProtocol is the protocol of the grep-search builtin (see SearchArgs).
var SearchProtocol = glob.Protocol{Tool: "grep", Marker: ReadyMarker, OwnerEnv: OwnerEnv, Stream: "output"}

// NewToken returns a fresh "oma-grep-<uuid>" ownership token.
func NewToken() string { return glob.NewToken(SearchProtocol.Tool) }

// NewReadinessFilter returns a filter for the search's marker.
func NewReadinessFilter() *glob.ReadinessFilter { return glob.NewReadinessFilter(SearchProtocol) }

// CleanupArgs are the search-kill builtin's arguments that end the search
// tagged with token; see glob.CleanupArgs.
func CleanupArgs(token string) []string { return glob.CleanupArgs(OwnerEnv, token) }

// CollectorOptions configure NewCollector.
type CollectorOptions struct {
	// Root is the absolute path given to SearchArgs.
	Root string
	// HeadLimit caps the matches silently; 0 means DefaultHeadLimit.
	HeadLimit int
	// Base, when set, makes results relative to it; else they are absolute.
	Base string
	// Match optionally re-checks paths relative to Root on the host.
	Match func(rel string) bool
}

// maxCountDigits bounds the count after each path: 20 digits hold any
// 64-bit count.
const maxCountDigits = 20

// Collector reads the search's records after the marker, each a path, a
// NUL, a decimal count and a newline, and collects the paths with a
// glob.Collector. It gives the same outcome however the stream is split.
type Collector struct {
	paths   *glob.Collector
	inCount bool // after a path's NUL, before its count's newline
	digits  int
	err     error
}

// NewCollector returns a collector for the search's output after the marker.
func NewCollector(opts CollectorOptions) (*Collector, error) {
	paths, err := glob.NewCollector(SearchProtocol, glob.CollectorOptions{
		Root:           opts.Root,
		Rooted:         true,
		Match:          opts.Match,
		MaxMatches:     opts.HeadLimit,
		MaxRawBytes:    MaxRawBytes,
		MaxOutputBytes: MaxOutputBytes,
		Base:           opts.Base,
	})
	if err != nil {
		return nil, err
	}
	return &Collector{paths: paths}, nil
}

// Push consumes the next chunk of the stream. After the match cap it ignores
// the rest; after an error it keeps returning that error.
func (c *Collector) Push(chunk []byte) error {
	for len(chunk) > 0 && c.err == nil && !c.paths.LimitReached() {
		if !c.inCount {
			i := bytes.IndexByte(chunk, 0)
			if i < 0 {
				c.err = c.paths.Push(chunk)
				break
			}
			c.err = c.paths.Push(chunk[:i+1])
			chunk = chunk[i+1:]
			c.inCount, c.digits = true, 0
			continue
		}
		b := chunk[0]
		chunk = chunk[1:]
		switch {
		case b >= '0' && b <= '9' && c.digits < maxCountDigits:
			c.digits++
		case b == '\n' && c.digits > 0:
			c.inCount = false
		default:
			c.err = &glob.StreamError{Msg: "Grep output holds a path without its match count", Kind: glob.ErrMalformed}
		}
	}
	return c.err
}

// Finish ends the stream: a record cut short is an error unless the match
// cap had already been reached.
func (c *Collector) Finish() error {
	if c.err == nil && c.inCount && !c.paths.LimitReached() {
		c.err = &glob.StreamError{Msg: "Grep output ended inside a record", Kind: glob.ErrMalformed}
	}
	if c.err != nil {
		return c.err
	}
	return c.paths.Finish()
}

// LimitReached reports that more matches exist than the head limit.
func (c *Collector) LimitReached() bool { return c.paths.LimitReached() }

// Matches returns the accepted paths in guest order.
func (c *Collector) Matches() []string { return c.paths.Matches() }

// SearchArgs are the arguments of the guest agent's grep-search builtin
// (agentwire.BuiltinGrepSearch), which lists the files under root whose
// contents match the ripgrep regex pattern, after the readiness marker, in
// path order (so a capped result is stable), each as a record: the path
// (beginning with root), a NUL, the number of matching lines and a newline
// (see Collector). ripgrepGlob ("" for none) is passed to --glob; see
// glob.ToRipgrep. Hidden and ignored files are searched; binary files,
// those holding a NUL byte, are not: ripgrep drops a file it finds by
// walking a directory when it meets a NUL, and --count makes it read every
// file to its end, so a match before the NUL does not list the file. A root
// that is a regular file is read once for a NUL first. ripgrep skips every
// file it walks to that is not regular (a FIFO would block it), and follows
// no symbolic link below root; a root that is a FIFO blocks it, as it
// blocks the search of a named FIFO, until the caller's timeout and
// cleanup.
//
// rg runs in a session of its own tagged OwnerEnv=token, and the marker
// follows its start, so that CleanupArgs' kill finds all work that follows
// readiness. ripgrep's "no match" status counts as success, and so does its
// status 2 when the pattern is valid and root exists: some files could not
// be read or vanished, and ripgrep's complaints about them are on stderr.
// Any other failure is the builtin's status.
func SearchArgs(root, token, pattern, ripgrepGlob string) []string {
	return []string{token, root, pattern, ripgrepGlob, ReadyMarker}
}
