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

// search is one streaming glob or grep run: a guest script that publishes a
// readiness marker and then NUL-separated paths.
type search struct {
	tool      string // "glob" or "grep"
	script    session.Command
	cleanup   session.Command
	readiness *glob.ReadinessFilter
	collector *glob.Collector
}

// searchCleanupTimeout bounds the command that ends a search's guest work.
const searchCleanupTimeout = 3 * time.Second

// run streams the search through one guest command and decides what its end
// means for the session:
//   - never ready: the guest's state is unknown, so the session is poisoned
//     (unless its sandbox is gone: then there is nothing left to poison);
//   - ready, and the guest work may still run (match cap, a limit error,
//     abort, timeout): the tagged processes are killed by a cleanup command,
//     and a failed cleanup poisons the session;
//   - ready, and the guest work ended by itself: nothing more to do, so a
//     normal call is one round trip.
func (t *Toolbox) runSearch(ctx context.Context, s search) ([]string, error) {
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
	res, err := t.sess.Shell(runCtx, s.script, session.ShellOptions{
		Stdout:    onStdout,
		MaxOutput: glob.DefaultMaxRawBytes + glob.MaxMarkerBytes + 64<<10,
	})
	endedByItself := err == nil && !capped && streamErr == nil

	if !s.readiness.Ready() {
		// A sandbox removed from outside leaves nothing unknown to poison.
		if errors.Is(err, session.ErrGone) {
			return nil, fmt.Errorf("%s: %w", s.tool, err)
		}
		cause := s.readiness.Finish()
		if streamErr != nil {
			cause = streamErr
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
		return s.collector.Matches(), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", s.tool, session.ErrAborted)
	case errors.Is(err, session.ErrHostTimeout):
		return nil, fmt.Errorf("%s timed out after %d seconds", title(s.tool), int(t.opTimeout.Seconds()))
	case err != nil:
		return nil, fmt.Errorf("%s: %w", s.tool, err)
	case res.ExitCode != 0:
		return nil, guestError(s.tool, "", res)
	}
	if err := s.collector.Finish(); err != nil {
		return nil, err
	}
	return s.collector.Matches(), nil
}

var errMatchCap = errors.New("match cap reached")

func (t *Toolbox) cleanupSearch(ctx context.Context, s search) error {
	ctx = context.WithoutCancel(ctx)
	res, err := t.sess.Shell(ctx, s.cleanup, session.ShellOptions{GuestTimeout: searchCleanupTimeout})
	if err != nil {
		return fmt.Errorf("%s cleanup: %w", s.tool, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s cleanup: guest processes survived (exit %d): %s", s.tool, res.ExitCode, strings.TrimSpace(string(clip(res.Stderr))))
	}
	return nil
}

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
