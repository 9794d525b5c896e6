package glob

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unsafe"
)

// Defaults for a Collector, from the glob tool's contract.
const (
	DefaultMaxMatches     = 100
	DefaultMaxRawBytes    = 1 << 20
	DefaultMaxOutputBytes = 64 << 10
	// MaxMarkerBytes is how much the host buffers while waiting for the
	// readiness marker's NUL.
	MaxMarkerBytes = 256
)

// Protocol names one tool's side of the guest stream: the marker the guest
// prints before its first path, the environment variable tagging the guest
// processes, and the words its errors use.
type Protocol struct {
	Tool     string // lower-case tool name, also the token kind
	Marker   string
	OwnerEnv string
	Stream   string // what raw-byte limit errors call the guest's stream
}

// The glob tool's protocol.
const (
	ReadyMarker = "__OMA_GLOB_READY__"
	OwnerEnv    = "OMA_GLOB_OWNER"
)

// EnumerationProtocol is the protocol of the glob-enumerate builtin (see
// EnumerationArgs).
var EnumerationProtocol = Protocol{Tool: "glob", Marker: ReadyMarker, OwnerEnv: OwnerEnv, Stream: "enumeration"}

func (p Protocol) title() string {
	if p.Tool == "" {
		return ""
	}
	return strings.ToUpper(p.Tool[:1]) + p.Tool[1:]
}

// Categories of stream errors, for errors.Is.
var (
	// ErrNotReady: the guest never proved it started, so its state is unknown.
	ErrNotReady = errors.New("guest did not publish readiness")
	// ErrLimit: the guest printed more than a byte limit allows.
	ErrLimit = errors.New("guest output exceeds a limit")
	// ErrMalformed: the guest printed something that is not a valid path list.
	ErrMalformed = errors.New("malformed guest output")
)

// StreamError carries the tool's message and one of the categories above.
type StreamError struct {
	Msg  string
	Kind error
}

func (e *StreamError) Error() string { return e.Msg }
func (e *StreamError) Unwrap() error { return e.Kind }

func streamErr(kind error, format string, args ...any) error {
	return &StreamError{Msg: fmt.Sprintf(format, args...), Kind: kind}
}

// ReadinessFilter strips the readiness marker from the head of a guest stream.
// The marker proves the guest work started; bytes are passed on only after it.
type ReadinessFilter struct {
	proto   Protocol
	pending []byte
	ready   bool
	err     error
}

// NewReadinessFilter returns a filter waiting for p's marker.
func NewReadinessFilter(p Protocol) *ReadinessFilter { return &ReadinessFilter{proto: p} }

// Push consumes a chunk and returns the bytes after the marker, which may
// alias chunk. Once it has failed it keeps returning the same error.
func (f *ReadinessFilter) Push(chunk []byte) ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.ready {
		return chunk, nil
	}
	room := MaxMarkerBytes + 1 - len(f.pending)
	i := bytes.IndexByte(chunk[:min(len(chunk), room)], 0)
	if i < 0 {
		f.pending = append(f.pending, chunk[:min(len(chunk), room)]...)
		if len(f.pending) > MaxMarkerBytes {
			f.err = streamErr(ErrNotReady, "%s readiness marker exceeds limit", f.proto.title())
			f.pending = nil
			return nil, f.err
		}
		return nil, nil
	}
	marker := append(f.pending, chunk[:i]...)
	f.pending = nil
	if string(marker) != f.proto.Marker {
		f.err = streamErr(ErrNotReady, "Invalid %s readiness marker", f.proto.Tool)
		return nil, f.err
	}
	f.ready = true
	return chunk[i+1:], nil
}

// Finish reports whether the ended stream carried the marker.
// After it, Push returns its error.
func (f *ReadinessFilter) Finish() error {
	if f.err != nil {
		return f.err
	}
	if !f.ready {
		f.err = streamErr(ErrNotReady, "%s process did not publish readiness", f.proto.title())
		f.pending = nil
	}
	return f.err
}

// Ready reports whether the marker has been seen.
func (f *ReadinessFilter) Ready() bool { return f.ready }

// CollectorOptions configure a Collector. Zero limits mean the defaults.
type CollectorOptions struct {
	// Root is the absolute guest path that was searched.
	Root string
	// Rooted says the guest prints paths that begin with Root (as ripgrep
	// does for an absolute root, and Root itself when Root is a file). Else
	// it prints paths relative to Root with a leading "./" (as find does).
	Rooted bool
	// Match filters paths relative to Root; nil accepts all. Root itself,
	// printed when it is a file, is not filtered. Its argument is valid only
	// during the call: Match must not keep it.
	Match func(rel string) bool
	// MaxMatches caps the result: the collector stops at the first match
	// past it and reports LimitReached (more matches exist), so the caller
	// can end the guest work and say the result is truncated.
	MaxMatches int
	// MaxRawBytes caps the guest's stream after the marker.
	MaxRawBytes int
	// MaxOutputBytes caps the newline-joined result.
	MaxOutputBytes int
	// Base, when set, makes results relative to this absolute path; else
	// results are absolute.
	Base string
}

// Collector turns a NUL-separated stream of guest paths into results. It
// gives the same outcome however the stream is split into chunks.
type Collector struct {
	proto       Protocol
	opts        CollectorOptions
	pending     []byte
	rawBytes    int
	outputBytes int
	matches     []string
	limit       bool
	err         error
}

// NewCollector checks opts and returns an empty collector.
func NewCollector(p Protocol, opts CollectorOptions) (*Collector, error) {
	if !path.IsAbs(opts.Root) {
		return nil, fmt.Errorf("%s collector root %q is not absolute", p.Tool, opts.Root)
	}
	if opts.Base != "" && !path.IsAbs(opts.Base) {
		return nil, fmt.Errorf("%s collector base %q is not absolute", p.Tool, opts.Base)
	}
	opts.Root = path.Clean(opts.Root)
	if opts.Base != "" {
		opts.Base = path.Clean(opts.Base)
	}
	if opts.MaxMatches <= 0 {
		opts.MaxMatches = DefaultMaxMatches
	}
	if opts.MaxRawBytes <= 0 {
		opts.MaxRawBytes = DefaultMaxRawBytes
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	return &Collector{proto: p, opts: opts}, nil
}

// Push consumes the next chunk of the stream. After the match cap it ignores
// the rest; after an error it keeps returning that error.
func (c *Collector) Push(chunk []byte) error {
	for len(chunk) > 0 && c.err == nil && !c.limit {
		i := bytes.IndexByte(chunk, 0)
		part := chunk
		if i >= 0 {
			part = chunk[:i+1]
		}
		chunk = chunk[len(part):]
		// Bytes count as they arrive, up to the record that hits the match
		// cap, so the outcome does not depend on chunk boundaries.
		c.rawBytes += len(part)
		if c.rawBytes > c.opts.MaxRawBytes {
			c.fail(streamErr(ErrLimit, "%s %s exceeds %d raw bytes", c.proto.title(), c.proto.Stream, c.opts.MaxRawBytes))
			break
		}
		if i < 0 {
			c.pending = append(c.pending, part...)
			break
		}
		record := part[:len(part)-1]
		if len(c.pending) > 0 {
			c.pending = append(c.pending, record...)
			record = c.pending
		}
		err := c.accept(transient(record))
		c.pending = c.pending[:0]
		if err != nil {
			c.fail(err)
		}
	}
	return c.err
}

func (c *Collector) fail(err error) {
	c.err = err
	c.pending = nil
}

// Finish ends the stream. A path left without its NUL means the stream was
// cut short, which is an error unless the match cap had already been reached.
func (c *Collector) Finish() error {
	if c.err != nil || c.limit {
		return c.err
	}
	if len(c.pending) > 0 {
		c.fail(streamErr(ErrMalformed, "%s %s ended inside a path", c.proto.title(), c.proto.Stream))
	}
	return c.err
}

// transient views b as a string without copying it, for the span of one
// accept call: a workspace's worth of paths then costs no allocation per
// path. Nothing may keep the string; accept copies what it keeps.
func transient(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// accept takes one record, a transient string (see transient).
func (c *Collector) accept(record string) error {
	rel, err := c.relative(record)
	if err != nil {
		return err
	}
	if strings.HasPrefix(path.Base(rel), WriteTempPrefix) {
		return nil
	}
	if rel != "" && c.opts.Match != nil && !c.opts.Match(rel) {
		return nil
	}
	if len(c.matches) == c.opts.MaxMatches {
		c.limit = true
		c.pending = nil
		return nil
	}
	abs := c.opts.Root
	if rel != "" {
		abs = path.Join(c.opts.Root, rel)
	}
	out := abs
	if c.opts.Base != "" {
		out = relativeTo(c.opts.Base, abs)
	}
	out = Display(out)
	added := len(out)
	if len(c.matches) > 0 {
		added++
	}
	if c.outputBytes+added > c.opts.MaxOutputBytes {
		return streamErr(ErrLimit, "%s output exceeds %d bytes", c.proto.title(), c.opts.MaxOutputBytes)
	}
	c.outputBytes += added
	c.matches = append(c.matches, out)
	return nil
}

// WriteTempPrefix begins the name of the write tool's temporary file, which
// lives beside its target for the instant before it is renamed into place.
// Listings (glob, grep, ls) never show such a name.
const WriteTempPrefix = ".oma-write."

// Display renders a path for a newline-separated result: a path holding a
// control character (a newline would split it in two) is shown as a
// double-quoted Go string literal with escapes; any other path as it is.
func Display(p string) string {
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0 {
		return p
	}
	return strconv.Quote(p)
}

// relative validates one guest path and returns it relative to Root ("" for
// Root itself). The guest is untrusted: nothing it prints may name a path
// outside Root.
func (c *Collector) relative(record string) (string, error) {
	bad := func() (string, error) {
		return "", streamErr(ErrMalformed, "%s %s returned an invalid path %q", c.proto.title(), c.proto.Stream, record)
	}
	var rel string
	if c.opts.Rooted {
		if record == c.opts.Root {
			return "", nil
		}
		prefix := strings.TrimSuffix(c.opts.Root, "/") + "/"
		var ok bool
		if rel, ok = strings.CutPrefix(record, prefix); !ok {
			return bad()
		}
	} else {
		var ok bool
		if rel, ok = strings.CutPrefix(record, "./"); !ok {
			return bad()
		}
	}
	if rel == "" {
		return bad()
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad()
		}
	}
	return rel, nil
}

// relativeTo expresses the clean absolute path target relative to the clean
// absolute directory base.
func relativeTo(base, target string) string {
	if base == target {
		return "."
	}
	if rest, ok := strings.CutPrefix(target, strings.TrimSuffix(base, "/")+"/"); ok {
		return rest
	}
	b := strings.Split(strings.Trim(base, "/"), "/")
	t := strings.Split(strings.Trim(target, "/"), "/")
	if b[0] == "" {
		b = nil
	}
	common := 0
	for common < len(b) && common < len(t) && b[common] == t[common] {
		common++
	}
	parts := make([]string, 0, len(b)-common+len(t)-common)
	for range b[common:] {
		parts = append(parts, "..")
	}
	return path.Join(append(parts, t[common:]...)...)
}

// LimitReached reports that more matches exist than the cap: the result is
// complete as far as it goes and the guest work can be ended.
func (c *Collector) LimitReached() bool { return c.limit }

// Matches returns the accepted paths in guest order.
func (c *Collector) Matches() []string { return c.matches }
