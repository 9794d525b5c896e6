package local

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// ForkOptions name a fork; everything else (policy, limits, environment,
// state directory, workspace id) is the source's.
type ForkOptions struct {
	// NamePrefix starts the fork's name; "" means "oma-local".
	NamePrefix string
	// SessionID is the fork's session id; required.
	SessionID string
	Logger    *slog.Logger
}

// Fork makes a new session whose workspace is a copy of this one's as it
// is now; uploads and outputs start empty. The copy is read from directory
// file descriptors and never follows a symlink the guest left: links are
// copied as links, regular files by content (hard links kept as links,
// holes as holes, at most session.MaxForkCopyBytes of data), directories
// with their modes; devices, FIFOs and sockets are skipped. The copy is
// of a workspace at rest: the session's resident sandbox, whichever
// process started it, is frozen while it is made, as msb stops a VM to
// fork it, and thawed after unless the session is paused (a sandbox of
// one call in flight, or one on a host without a freezer, may still
// write). The fork's record names this session as its parent; the two
// share nothing afterwards. A source another process removes while it is
// copied fails the fork with session.ErrGone.
func (s *Session) Fork(ctx context.Context, o ForkOptions) (*Session, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if o.SessionID == "" {
		return nil, &PolicyError{Field: "session id", Value: "", Reason: "a fork needs a session id of its own"}
	}
	log := o.Logger
	if log == nil {
		log = s.log
	}
	child, err := Create(ctx, Options{
		StateDir: filepath.Dir(s.dirs.Root), NamePrefix: o.NamePrefix,
		WorkspaceID: s.rec.WorkspaceID, SessionID: o.SessionID,
		Policy: s.rec.Policy, Limits: s.limits(), OperationTimeout: s.rec.OpTimeout,
		Env: s.rec.Env, Bwrap: s.rec.Bwrap, Audit: s.audit, Logger: log,
		parent: s.rec.Name,
	})
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: fork: %w", s.rec.Name, err)
	}
	child.agent = s.agent
	if !s.paused() {
		release, err := holdFreeze(ctx, s.dirs.Root)
		if err != nil {
			child.closeAfterFailedFork(ctx, log)
			return nil, fmt.Errorf("local sandbox %s: fork: %w", s.rec.Name, err)
		}
		defer release()
		if frozen, err := freezeResident(ctx, s.dirs.Root, true, s.opTimeout(), nil); err != nil {
			log.Warn("local sandbox: fork: the resident sandbox did not freeze; copying it as it runs", "err", err)
		} else if frozen {
			defer s.thawUnlessPaused(context.WithoutCancel(ctx), log)
		}
	}
	skipped, err := copyWorkspace(ctx, s.dirs.Workspace, child.dirs.Workspace, session.MaxForkCopyBytes)
	if err == nil && s.removedElsewhere() {
		// Removed by another process as it was copied: the copy may hold
		// only part of the workspace.
		err = s.gone()
	}
	if err != nil {
		child.closeAfterFailedFork(ctx, log)
		return nil, fmt.Errorf("local sandbox %s: fork: workspace: %w", s.rec.Name, err)
	}
	if len(skipped) > 0 {
		log.Info("local sandbox: fork skipped special files", "fork", child.rec.Name, "paths", skipped)
	}
	return child, nil
}

// closeAfterFailedFork removes s, a fork that failed.
func (s *Session) closeAfterFailedFork(ctx context.Context, log *slog.Logger) {
	if err := s.Close(context.WithoutCancel(ctx)); err != nil {
		log.Warn("local sandbox: removing a failed fork", "fork", s.rec.Name, "err", err)
	}
}

// copyWorkspace copies a workspace for Fork; a variable for the tests.
var copyWorkspace = safefs.CopyTree

// thawUnlessPaused thaws the resident sandbox a fork froze, unless the
// session was paused meanwhile, by any process (Pause marks the session
// before it takes the resident lock to freeze).
func (s *Session) thawUnlessPaused(ctx context.Context, log *slog.Logger) {
	if _, err := freezeResident(ctx, s.dirs.Root, false, s.opTimeout(), s.paused); err != nil {
		log.Warn("local sandbox: fork: thawing the resident sandbox", "err", err)
	}
}

// Parent names the session this one was forked from; "" if none.
func (s *Session) Parent() string { return s.rec.Parent }
