package msb

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrMalformedOutput is matched by every *ParseError.
var ErrMalformedOutput = errors.New("malformed msb output")

// maxDetail bounds the msb message or stderr tail quoted in an error text.
const maxDetail = 512

func (e *ExitError) Error() string {
	status := "exit " + strconv.Itoa(e.ExitCode)
	if e.ExitCode < 0 {
		status = "killed by a signal"
	}
	detail := bound(e.Message, maxDetail)
	if detail == "" {
		detail = stderrTail(e.Stderr)
	}
	if detail == "" {
		return fmt.Sprintf("msb %s: %s", subcommand(e.Args), status)
	}
	if !e.RetryAt.IsZero() {
		detail += "; msb refuses every command until " + e.RetryAt.Format(time.RFC3339) +
			" (its install lease, which an msb killed while opening its database leaves held)"
	}
	return fmt.Sprintf("msb %s: %s: %s", subcommand(e.Args), status, detail)
}

// Unwrap exposes Kind so errors.Is matches the recognised msb failure.
func (e *ExitError) Unwrap() error { return e.Kind }

// OverflowError reports that msb's output exceeded the runner's cap; the
// process group was killed. It matches ErrOutputOverflow.
type OverflowError struct {
	Args  []string
	Limit int64 // bytes of stdout+stderr allowed
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("msb %s: output exceeds the cap of %d bytes; process group killed", subcommand(e.Args), e.Limit)
}

// Is makes every OverflowError match ErrOutputOverflow.
func (e *OverflowError) Is(t error) bool { return t == ErrOutputOverflow }

// ParseError reports msb output that does not have the documented shape.
// It matches ErrMalformedOutput.
type ParseError struct {
	Output string // "list", "inspect" or "volume list"
	Index  int    // entry index in a listing; -1 when not in a listing
	Field  string // JSON path of the offending field; "" for the document itself
	Reason string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString("msb ")
	b.WriteString(e.Output)
	b.WriteString(" output")
	if e.Index >= 0 {
		fmt.Fprintf(&b, ", entry %d", e.Index)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ", field %q", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes every ParseError match ErrMalformedOutput.
func (e *ParseError) Is(t error) bool { return t == ErrMalformedOutput }

// subcommand names the msb command an argv runs, for error texts.
func subcommand(args []string) string {
	switch {
	case len(args) == 0:
		return "(no arguments)"
	case args[0] == "volume" && len(args) > 1:
		return "volume " + bound(args[1], 32)
	default:
		return bound(args[0], 32)
	}
}

// bound cuts s to at most n bytes on a rune boundary and makes it valid UTF-8.
func bound(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// stderrTail renders the last few non-empty stderr lines on one line.
func stderrTail(stderr []byte) string {
	var lines []string
	for _, l := range strings.Split(string(stderr), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	joined := strings.ToValidUTF8(strings.Join(lines, "; "), "\uFFFD")
	if len(joined) <= maxDetail {
		return joined
	}
	// Keep the end: msb's own error comes after any guest output.
	cut := len(joined) - maxDetail
	for cut < len(joined) && !utf8.RuneStart(joined[cut]) {
		cut++
	}
	return "..." + joined[cut:]
}

// StripANSI removes terminal escape sequences (CSI such as colours, OSC
// such as titles and links, and two-byte escapes) and carriage returns.
func StripANSI(s string) string {
	if strings.IndexByte(s, 0x1b) < 0 && strings.IndexByte(s, '\r') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\r':
			i++
		case c != 0x1b:
			b.WriteByte(c)
			i++
		case i+1 >= len(s):
			i++
		case s[i+1] == '[':
			i = skipCSI(s, i+2)
		case s[i+1] == ']':
			i = skipOSC(s, i+2)
		default:
			i = skipEscape(s, i+1)
		}
	}
	return b.String()
}

// skipCSI returns the index after a CSI sequence whose body starts at i:
// parameter and intermediate bytes, then one final byte.
func skipCSI(s string, i int) int {
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x3f {
		i++
	}
	if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
		i++
	}
	return i
}

// skipEscape returns the index after a non-CSI escape whose body starts at
// i: intermediate bytes, then one final byte (ESC ( B, ESC 7, ...).
func skipEscape(s string, i int) int {
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
		i++
	}
	if i < len(s) {
		i++
	}
	return i
}

// skipOSC returns the index after an OSC sequence ended by BEL or ESC \.
func skipOSC(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == 0x07:
			return i + 1
		case s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\':
			return i + 2
		}
		i++
	}
	return i
}

// classify finds msb's error in stripped stderr and maps it to a sentinel.
// The last "error: " line wins because msb prints its own error after
// whatever the guest wrote; the indented "→ ..." lines msb prints under it
// (a failed start's cause, where to look next) belong to it and are kept,
// joined by " → ". Names in msb's messages must be among args (or be the
// NAME of a NAME:/path copy operand), so guest output that merely looks
// like an msb error about some other resource is not mistaken for one.
func classify(args []string, exitCode int, stderr []byte) (message string, kind error) {
	var head string
	var hints []string
	for line := range bytes.Lines(stderr) {
		l := strings.TrimRight(string(line), " \t\r\n")
		if rest, ok := strings.CutPrefix(l, "error: "); ok {
			head, hints = strings.TrimSpace(rest), nil
			continue
		}
		if hint, ok := cutHint(l); ok && head != "" {
			hints = append(hints, hint)
			continue
		}
		if head != "" && l != "" {
			// Anything else after the error (guest output) ends its hints.
			message = joinHints(head, hints)
			head, hints = "", nil
		}
	}
	if head != "" {
		message = joinHints(head, hints)
	}
	if message == "" {
		return "", nil
	}
	head, _, _ = strings.Cut(message, " → ")
	named := func(prefix string) bool {
		name, ok := strings.CutPrefix(head, prefix)
		return ok && mentions(args, name)
	}
	switch {
	case named("sandbox not found: "):
		kind = ErrSandboxNotFound
	case named("volume not found: "):
		kind = ErrVolumeNotFound
	case snapshotNamed(head, "snapshot not found: ", args):
		kind = ErrSnapshotNotFound
	case named("sandbox already exists: "), named("volume already exists: "), existsQuoted(head, args), snapshotNamed(head, "snapshot already exists: ", args):
		kind = ErrAlreadyExists
	case attachedVolume(head, args):
		kind = ErrVolumeAttached
	case strings.HasPrefix(head, "exec timed out after") && len(args) > 0 && args[0] == "exec":
		kind = ErrExecTimedOut
	case (exitCode == 126 || exitCode == 127) && strings.HasPrefix(head, "failed to exec"):
		kind = ErrCannotStart
	case quotedName(head, "failed to start ", args) && len(args) > 0 && (args[0] == "create" || args[0] == "start"):
		kind = ErrStartFailed
	case named("image error: image not cached: "), named("image not found: "):
		kind = ErrImageNotCached
	case quotedName(head, "no metrics recorded for sandbox ", args) && len(args) > 0 && args[0] == "metrics":
		kind = ErrNoMetrics
	case restartRequired(head, args):
		kind = ErrRestartRequired
	case stillRunning(head, args):
		kind = ErrStillRunning
	case refusedForLease(message, stderr):
		kind = ErrInstallInProgress
	}
	return message, kind
}

// newExitError builds the *ExitError of a non-zero exit from msb's stripped
// stderr tail; quiet says msb wrote nothing on stdout.
func newExitError(args []string, code int, tail []byte, quiet bool) *ExitError {
	msg, kind := classify(args, code, tail)
	if kind == ErrInstallInProgress && !quiet {
		// msb refuses before anything runs: output is a guest's.
		kind = nil
	}
	e := &ExitError{Args: args, ExitCode: code, Message: msg, Stderr: tail, Kind: kind}
	if kind == ErrInstallInProgress {
		e.RetryAt, _ = installLeaseUntil(msg)
	}
	return e
}

// refusedForLease recognises msb's refusal while its install lease is held.
// msb refuses before it does anything else, so its error is the whole of
// stderr (and stdout is empty, which newExitError checks): a guest's
// output that imitates it is not taken for it.
func refusedForLease(message string, stderr []byte) bool {
	_, ok := installLeaseUntil(message)
	return ok && strings.TrimSpace(string(stderr)) == "error: "+message
}

// snapshotNamed recognises msb's "PREFIX$MSB_HOME/snapshots/NAME" about a
// snapshot named in args of a snapshot subcommand.
func snapshotNamed(head, prefix string, args []string) bool {
	path, ok := strings.CutPrefix(head, prefix)
	if !ok || len(args) == 0 || args[0] != "snapshot" {
		return false
	}
	name := path[strings.LastIndexByte(path, '/')+1:]
	return mentions(args, name) || mentions(args, path)
}

// cutHint recognises msb's indented "  → text" lines under an error.
func cutHint(line string) (string, bool) {
	t := strings.TrimLeft(line, " \t")
	if len(t) == len(line) {
		return "", false
	}
	rest, ok := strings.CutPrefix(t, "→")
	return strings.TrimSpace(rest), ok
}

func joinHints(head string, hints []string) string {
	for _, h := range hints {
		if h != "" {
			head += " → " + h
		}
	}
	return head
}

// mentions reports whether name is one of args, or the NAME of a
// NAME:/path operand of copy. An image reference is matched too, including
// the docker.io/[library/] form msb prints for a short one.
func mentions(args []string, name string) bool {
	if name == "" {
		return false
	}
	for i, a := range args {
		switch {
		case a == name:
			return true
		case i > 0 && (args[0] == "copy" || args[0] == "cp") && strings.HasPrefix(a, name+":/"):
			return true
		case strings.HasPrefix(name, "docker.io/") && (name == "docker.io/"+a || name == "docker.io/library/"+a || name == "docker.io/"+a+":latest" || name == "docker.io/library/"+a+":latest"):
			return true
		}
	}
	return false
}

// existsQuoted recognises msb 0.6.18's
// `sandbox already exists: sandbox 'N' already exists; remove it, ...`.
func existsQuoted(message string, args []string) bool {
	rest, ok := strings.CutPrefix(message, "sandbox already exists: sandbox '")
	if !ok {
		return false
	}
	name, tail, ok := strings.Cut(rest, "'")
	return ok && strings.HasPrefix(tail, " already exists") && mentions(args, name)
}

// quotedName recognises PREFIX"NAME" for a NAME in args.
func quotedName(message, prefix string, args []string) bool {
	rest, ok := strings.CutPrefix(message, prefix+`"`)
	if !ok {
		return false
	}
	name, tail, ok := strings.Cut(rest, `"`)
	return ok && (tail == "" || strings.HasPrefix(tail, ":")) && mentions(args, name)
}

// stillRunning recognises start's and remove's refusal of a running
// sandbox, `sandbox still running: cannot start sandbox 'NAME': already
// running` (remove: `cannot remove sandbox 'NAME': still running`), for a
// NAME in args.
func stillRunning(message string, args []string) bool {
	if len(args) == 0 || args[0] != "start" && args[0] != "remove" {
		return false
	}
	rest, ok := strings.CutPrefix(message, "sandbox still running: cannot "+args[0]+" sandbox '")
	if !ok {
		return false
	}
	name, _, ok := strings.Cut(rest, "'")
	return ok && mentions(args, name)
}

// restartRequired recognises modify's
// `cannot modify "NAME" without a restart` for a NAME in args.
func restartRequired(message string, args []string) bool {
	rest, ok := strings.CutPrefix(message, `cannot modify "`)
	if !ok || len(args) == 0 || args[0] != "modify" {
		return false
	}
	name, tail, ok := strings.Cut(rest, `"`)
	return ok && tail == " without a restart" && mentions(args, name)
}

// attachedVolume recognises
// `invalid config: volume "V" is attached to active sandbox "S"` for a V in args.
func attachedVolume(message string, args []string) bool {
	rest, ok := strings.CutPrefix(message, `invalid config: volume "`)
	if !ok {
		return false
	}
	vol, _, ok := strings.Cut(rest, `" is attached to active sandbox "`)
	return ok && vol != "" && slices.Contains(args, vol)
}
