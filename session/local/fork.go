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
// with their modes; devices, FIFOs and sockets are skipped. A call in
// flight or a background process of the session's sandbox may write while
// the copy is made: fork a paused session (its sandbox frozen) for a copy
// at rest. The fork's record names this session as its parent; the two
// share nothing afterwards.
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
	skipped, err := safefs.CopyTree(ctx, s.dirs.Workspace, child.dirs.Workspace, session.MaxForkCopyBytes)
	if err != nil {
		if cerr := child.Close(context.WithoutCancel(ctx)); cerr != nil {
			log.Warn("local sandbox: removing a failed fork", "fork", child.rec.Name, "err", cerr)
		}
		return nil, fmt.Errorf("local sandbox %s: fork: workspace: %w", s.rec.Name, err)
	}
	if len(skipped) > 0 {
		log.Info("local sandbox: fork skipped special files", "fork", child.rec.Name, "paths", skipped)
	}
	return child, nil
}

// Parent names the session this one was forked from; "" if none.
func (s *Session) Parent() string { return s.rec.Parent }
