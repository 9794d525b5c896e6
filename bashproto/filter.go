package bashproto

import (
	"bytes"
	"errors"
	"fmt"
)

const (
	dispatchPrefix = "__OMA_DISPATCHED__:"
	terminalPrefix = "__OMA_TERMINAL__:"
	timeoutTail    = "timeout:137\n"
	exitTag        = "exit:"
)

// Errors of Filter, tested with errors.Is.
var (
	ErrNoDispatch   = errors.New("bash failed before command dispatch")
	ErrNoCompletion = errors.New("bash failed before command completion")
	ErrExitMismatch = errors.New("bash exit disagreed with command completion")
	ErrFilterClosed = errors.New("bash output filter is closed")
)

// Terminal is a parsed terminal record.
type Terminal struct {
	Timeout bool // the guest timer killed the command
	Code    int  // the command's exit status; TimeoutExitCode on timeout
}

// Filter strips the sentinel lines of one Script run from its stdout stream
// and forwards every other byte, in order and unchanged, however the stream
// is split into writes.
//
// The dispatch line is recognised once, before anything else; bytes before
// it (which can only come from the script failing early) are forwarded, not
// dropped. After it, every well-formed terminal line (the token, then
// `exit:` with a status from 0 to 255 without leading zeros, or
// `timeout:137`, then a newline) is stripped; a sentinel-like line that is
// not well-formed is ordinary output. A terminal line need not start a line,
// since the command's output may not end with a newline.
//
// While the stream's tail could still become a sentinel it is held back;
// that is never more than one sentinel's length.
type Filter struct {
	dispatch []byte // the whole dispatch line
	terminal []byte // terminal prefix up to the record's kind
	longest  int
	forward  func([]byte)

	held       []byte
	dispatched bool
	first      Terminal
	terminals  int
	closed     bool
}

// NewFilter returns a filter for the Script run with token that passes
// output to forward. forward must not retain the slice it is given.
func NewFilter(token string, forward func([]byte)) *Filter {
	f := &Filter{
		dispatch: []byte(dispatchPrefix + token + "\n"),
		terminal: []byte(terminalPrefix + token + ":"),
		forward:  forward,
	}
	f.longest = max(len(f.dispatch), len(f.terminal)+len(timeoutTail))
	return f
}

// Write filters p. It always consumes all of p; the error is non-nil only
// after Close.
func (f *Filter) Write(p []byte) (int, error) {
	if f.closed {
		return 0, ErrFilterClosed
	}
	n := len(p)
	if len(f.held) > 0 {
		// The held tail needs at most one sentinel's length of lookahead to
		// be decided, so only that much of p is copied next to it.
		heldLen := len(f.held)
		f.held = append(f.held, p[:min(len(p), f.longest)]...)
		r := f.scan(f.held, false)
		if r < heldLen {
			// Still undecided: all of p was appended and is held.
			f.held = f.held[:copy(f.held, f.held[r:])]
			return n, nil
		}
		f.held = f.held[:0]
		p = p[r-heldLen:]
	}
	r := f.scan(p, false)
	f.held = append(f.held, p[r:]...)
	return n, nil
}

// Close forwards any held bytes; a sentinel cut off by the end of the stream
// is ordinary output.
func (f *Filter) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.scan(f.held, true)
	f.held = nil
	return nil
}

// DispatchSeen reports whether the dispatch line has been seen.
func (f *Filter) DispatchSeen() bool { return f.dispatched }

// Terminal returns the first terminal record seen, if any.
func (f *Filter) Terminal() (Terminal, bool) { return f.first, f.terminals > 0 }

// Verdict judges a finished run, after Close, given the exit status the
// process running Script reported. It returns nil only when the dispatch
// line and exactly one terminal record were seen and the status agrees with
// that record (TimeoutExitCode for a timeout). The command can print a
// forged terminal line, but the real one always follows it, so a forgery
// shows up as a second record and is refused rather than believed; the
// process status always has the last word.
func (f *Filter) Verdict(processExit int) error {
	switch {
	case !f.dispatched:
		return ErrNoDispatch
	case f.terminals == 0:
		return ErrNoCompletion
	case f.terminals > 1:
		return fmt.Errorf("%w: %d terminal records, process exited with %d", ErrExitMismatch, f.terminals, processExit)
	case processExit != f.first.Code:
		return fmt.Errorf("%w: terminal record %s, process exited with %d", ErrExitMismatch, f.first, processExit)
	}
	return nil
}

func (t Terminal) String() string {
	if t.Timeout {
		return fmt.Sprintf("timeout:%d", t.Code)
	}
	return fmt.Sprintf("exit:%d", t.Code)
}

// scan forwards the decided part of buf, minus sentinels, and returns where
// the undecided tail starts (len(buf) if there is none). At the end of the
// stream (final) nothing is undecided.
func (f *Filter) scan(buf []byte, final bool) int {
	start, i := 0, 0
	for {
		j := bytes.IndexByte(buf[i:], '_') // every sentinel starts with '_'
		if j < 0 {
			break
		}
		i += j
		n, partial := f.match(buf[i:])
		switch {
		case n > 0:
			f.emit(buf[start:i])
			i += n
			start = i
		case partial && !final:
			f.emit(buf[start:i])
			return i
		default:
			i++
		}
	}
	f.emit(buf[start:])
	return len(buf)
}

func (f *Filter) emit(b []byte) {
	if len(b) > 0 {
		f.forward(b)
	}
}

// match reports whether b starts with the sentinel expected now: its length
// n when complete (recording it), or partial when b is a proper prefix of
// one.
func (f *Filter) match(b []byte) (n int, partial bool) {
	if !f.dispatched {
		n, partial = matchLiteral(b, f.dispatch)
		if n > 0 {
			f.dispatched = true
		}
		return n, partial
	}
	t, n, partial := f.matchTerminal(b)
	if n > 0 {
		if f.terminals == 0 {
			f.first = t
		}
		f.terminals++
	}
	return n, partial
}

func (f *Filter) matchTerminal(b []byte) (t Terminal, n int, partial bool) {
	p := len(f.terminal)
	if n, partial := matchLiteral(b, f.terminal); n == 0 {
		return t, 0, partial
	}
	rest := b[p:]
	if len(rest) == 0 {
		return t, 0, true
	}
	if rest[0] == timeoutTail[0] {
		n, partial := matchLiteral(rest, []byte(timeoutTail))
		if n == 0 {
			return t, 0, partial
		}
		return Terminal{Timeout: true, Code: TimeoutExitCode}, p + n, false
	}
	if n, partial := matchLiteral(rest, []byte(exitTag)); n == 0 {
		return t, 0, partial
	}
	digits := rest[len(exitTag):]
	code := 0
	for i, c := range digits {
		switch {
		case c == '\n' && i > 0:
			return Terminal{Code: code}, p + len(exitTag) + i + 1, false
		case c < '0' || c > '9' || (i > 0 && digits[0] == '0'):
			return t, 0, false
		}
		code = code*10 + int(c-'0')
		if code > 255 {
			return t, 0, false
		}
	}
	return t, 0, true
}

// matchLiteral is len(lit) if b starts with lit; otherwise partial says
// whether b is a proper prefix of lit.
func matchLiteral(b, lit []byte) (n int, partial bool) {
	if len(b) < len(lit) {
		return 0, bytes.HasPrefix(lit, b)
	}
	if bytes.HasPrefix(b, lit) {
		return len(lit), false
	}
	return 0, false
}
