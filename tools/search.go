package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// search is one streaming glob or grep run: a guest builtin that publishes
// a readiness marker and then NUL-separated paths, and the builtin that
// kills what it left running.
type search struct {
	tool      string // "glob" or "grep"
	work      session.Command
	cleanup   session.Command
	readiness *glob.ReadinessFilter
	collector collector
}

// collector takes a search's stream after the marker: glob.Collector for
// glob's paths, grep.Collector for grep's records.
type collector interface {
	Push(chunk []byte) error
	LimitReached() bool
	Matches() []string
	Finish() error
}

// searchCleanupTimeout bounds the command that ends a search's guest work,
// unless the toolbox's operation timeout is longer: a guest slow enough to
// be given more time for its commands (a VM under emulation) gets it for
// the cleanup too, rather than a session poisoned for a cleanup cut short.
const searchCleanupTimeout = 3 * time.Second

// run streams the search through one guest command and decides what its end
// means for the session:
//   - never ready: the guest's state is unknown, so the session is poisoned
//     (unless its sandbox is gone: then there is nothing left to poison);
//   - ready, and the guest work may still run (match cap, a limit error,
//     abort, timeout): the tagged processes are killed by the cleanup builtin,
//     and a failed cleanup poisons the session;
//   - ready, and the guest work ended by itself: nothing more to do, so a
//     normal call is one round trip.
func (t *Toolbox) runSearch(ctx context.Context, s search) (*searchResult, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var streamErr error
	capped := false
	onStdout := func(chunk []byte) {
		if streamErr != nil || capped {
			return
		}
		rest, err := s.readiness.Push(chunk)
		if err == nil && len(rest) > 0 {
			err = s.collector.Push(rest)
		}
		switch {
		case err != nil:
			streamErr = err
			cancel(err)
		case s.collector.LimitReached():
			capped = true
			cancel(errMatchCap)
		}
	}
	res, err := t.sess.Shell(runCtx, s.work, session.ShellOptions{
		Stdout:       onStdout,
		GuestTimeout: t.opTimeout,
		MaxOutput:    glob.DefaultMaxRawBytes + glob.MaxMarkerBytes + 64<<10,
	})
	endedByItself := err == nil && !capped && streamErr == nil

	if !s.readiness.Ready() {
		// A sandbox removed from outside, or a call refused before it
		// started, leaves nothing unknown to poison.
		if nothingStarted(err) {
			return nil, fmt.Errorf("%s: %w", s.tool, err)
		}
		cause := s.readiness.Finish()
		switch {
		case streamErr != nil:
			cause = streamErr
		case timedOut(err):
			// Out of time before the guest proved it started (a guest
			// too slow, or too busy): still unknown, but say why.
			cause = t.timeoutError(s.tool, " before the guest was ready", errors.Join(err, cause))
		}
		if ctx.Err() != nil {
			cause = fmt.Errorf("%s aborted before the guest was ready: %w", s.tool, session.ErrAborted)
		}
		if perr := t.sess.Poison(context.WithoutCancel(ctx), cause); perr != nil {
			return nil, errors.Join(cause, perr)
		}
		return nil, cause
	}
	if !endedByItself {
		if cerr := t.cleanupSearch(ctx, s); cerr != nil {
			if perr := t.sess.Poison(context.WithoutCancel(ctx), cerr); perr != nil {
				cerr = errors.Join(cerr, perr)
			}
			return nil, cerr
		}
	}
	switch {
	case streamErr != nil:
		return nil, streamErr
	case capped:
		return keepFound(ctx, &searchResult{matches: s.collector.Matches(), truncated: true}), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", s.tool, session.ErrAborted)
	case timedOut(err):
		return nil, t.timeoutError(s.tool, "", err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", s.tool, err)
	case res.ExitCode != 0:
		return nil, guestError(s.tool, "", res)
	}
	if err := s.collector.Finish(); err != nil {
		return nil, err
	}
	return keepFound(ctx, &searchResult{matches: s.collector.Matches(), skipped: skippedPaths(res.Stderr)}), nil
}

// timedOut reports whether a search's guest command ran out of the
// operation timeout, by the host's deadline or the guest's timer.
func timedOut(err error) bool {
	return errors.Is(err, session.ErrHostTimeout) || errors.Is(err, session.ErrGuestTimeout)
}

// timeoutError says that tool ran out of the operation timeout (then
// what, which may be empty), wrapping err.
func (t *Toolbox) timeoutError(tool, then string, err error) error {
	return &wrapped{msg: fmt.Sprintf("%s timed out after %s%s", title(tool), seconds(t.opTimeout), then), err: err}
}

// searchResult is what a search found.
type searchResult struct {
	matches   []string
	truncated bool     // more matches exist than were kept
	skipped   []string // what could not be searched, as the guest said it
}

// skippedPaths picks the complaints of find or ripgrep about paths they
// could not search out of a successful search's stderr. A path that vanished
// during the search (a concurrent write's temporary file, a deleted
// directory) is not worth a word: it no longer exists.
func skippedPaths(stderr []byte) []string {
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(clip(stderr))), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.Contains(line, "No such file or directory") {
			continue
		}
		line = strings.TrimPrefix(strings.TrimPrefix(line, "rg: "), "find: ")
		out = append(out, glob.Display(line))
	}
	return out
}

// format renders a search's text result: the matches, or empty when none,
// then a bracketed line for a truncated result (more says how to see more)
// and one naming what could not be searched.
func (r *searchResult) format(empty, more string) string {
	text := empty
	if len(r.matches) > 0 {
		text = strings.Join(r.matches, "\n")
	}
	var notes []string
	if r.truncated {
		notes = append(notes, fmt.Sprintf("[Showing the first %d results; more match. %s]", len(r.matches), more))
	}
	if len(r.skipped) > 0 {
		const shown = 5
		list := strings.Join(r.skipped[:min(len(r.skipped), shown)], "; ")
		if len(r.skipped) > shown {
			list += fmt.Sprintf("; and %d more", len(r.skipped)-shown)
		}
		notes = append(notes, "[Could not search: "+list+"]")
	}
	if len(notes) > 0 {
		text += "\n\n" + strings.Join(notes, "\n")
	}
	return text
}

// wrapped is an error whose text is msg and whose category is err's.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// seconds renders a timeout as agent tools do ("10 seconds").
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d seconds", int(d/time.Second))
	}
	return fmt.Sprintf("%g seconds", d.Seconds())
}

var errMatchCap = errors.New("match cap reached")

func (t *Toolbox) cleanupSearch(ctx context.Context, s search) error {
	var exit *cleanupExit
	switch err := t.runCleanup(ctx, s.cleanup, max(searchCleanupTimeout, t.opTimeout)); {
	case errors.As(err, &exit):
		return fmt.Errorf("%s cleanup: guest processes survived (exit %d): %s", s.tool, exit.code, exit.stderr)
	case sessionOver(err):
		return nil // nothing of the session runs on to clean up
	case err != nil:
		return fmt.Errorf("%s cleanup: %w", s.tool, err)
	}
	return nil
}

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
