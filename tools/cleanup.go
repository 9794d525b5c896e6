package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// cleanupExit is a cleanup command that ended with a non-zero status.
type cleanupExit struct {
	code   int
	stderr string
}

func (e *cleanupExit) Error() string { return fmt.Sprintf("exit %d: %s", e.code, e.stderr) }

// runCleanup runs an idempotent guest command that kills what a call left
// running (bash's kill, a search's cleanup), whatever ctx says: the call is
// already over for its caller. It is sent again, up to cleanupSends times
// in all, when the msb backend's guest-agent channel died under it (the
// next Shell reopens the channel or falls back to one exec per call), or
// when it ended with a status and not a word, as the real msb's exec ends
// (255) when it runs just after a command the host cut short: after a
// pause, since msb has been seen to answer so twice in a row. A send finds
// nothing left where an earlier one did its work; a failure of the last is
// returned, and nothing proves the processes are gone.
func (t *Toolbox) runCleanup(ctx context.Context, cmd session.Command, timeout time.Duration) error {
	send := func() error {
		res, err := t.sess.Shell(context.WithoutCancel(ctx), cmd, session.ShellOptions{GuestTimeout: timeout})
		if err == nil && res.ExitCode != 0 {
			err = &cleanupExit{code: res.ExitCode, stderr: strings.TrimSpace(string(clip(res.Stderr)))}
		}
		return err
	}
	err := send()
	for i := 1; i < cleanupSends; i++ {
		var exit *cleanupExit
		broken := errors.Is(err, session.ErrChannelBroken)
		if !broken && !(errors.As(err, &exit) && exit.stderr == "") {
			break
		}
		if !broken {
			time.Sleep(cleanupPause * time.Duration(i))
		}
		err = send()
	}
	return err
}

// nothingStarted reports an error of a call's Shell after which none of
// the call's processes can be running, so there is nothing to kill or
// poison: the session is over (sessionOver), or the backend refused the
// call before starting it (a paused session that does not resume on use).
// Cleaning up after a refusal would be sent to the same paused session,
// fail the same way and poison a session whose processes are all fine.
func nothingStarted(err error) bool {
	return sessionOver(err) || errors.Is(err, session.ErrPaused)
}

// cleanupSends bounds how often runCleanup sends its command, and
// cleanupPause is the pause before a send after a wordless status (the
// pause grows with each send).
const (
	cleanupSends = 3
	cleanupPause = 250 * time.Millisecond
)
