package omasandbox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// Fork makes a new session whose workspace is a copy of this one's at this
// moment; from then on the two diverge and closing one never touches the
// other. sessionID is the fork's session id ("" picks a random one); the
// workspace id is the source's. The fork carries its parent's name: on msb
// the label open-managed-agents.parent, locally in its record.
//
// msb: the source is paused (msb stop), its root disk snapshotted, the
// fork created from that snapshot (which is removed right after: the fork
// has its own copy of the disk) and the source's workspace volume copied
// host-side into the fork's new one; the source is resumed afterwards if
// it was running. The fork so has the source's image and root disk; it
// gets the source's CPUs and memory and the network policy of the Options
// this Session was opened or attached with (none unless they name one).
// Local: the workspace directory is copied while the source's sandbox is
// frozen (it runs on after, unless paused); the fork keeps the source's
// policy, limits and environment. Uploads and outputs start empty on both.
// Neither copy follows a symlink the guest left.
func (s *Session) Fork(ctx context.Context, sessionID string) (*Session, error) {
	ctx, a := s.beginAction(ctx, "fork")
	f, err := s.fork(ctx, sessionID)
	var attrs []slog.Attr
	if f != nil {
		attrs = append(attrs, slog.String("fork", f.Name()))
	}
	s.endAction(ctx, a, err, attrs...)
	return f, err
}

func (s *Session) fork(ctx context.Context, sessionID string) (*Session, error) {
	if sessionID == "" {
		sessionID = strings.SplitN(uuid.NewString(), "-", 2)[0]
	}
	var (
		fork session.Session
		err  error
	)
	switch src := s.sess.(type) {
	case *microvm.Session:
		var f *microvm.Session
		f, err = src.Fork(ctx, microvm.Options{
			Client: s.opts.client(), SessionID: sessionID,
			Network: s.opts.Network, IdleTimeout: s.opts.IdleTimeout, NoAutoResume: s.opts.NoAutoResume,
			OperationTimeout: s.opts.OperationTimeout, Logger: s.opts.logger(),
		})
		if err == nil {
			if s.opts.OneExecPerCall {
				f.DisableAgentChannel()
			}
			fork = f
		}
	case *local.Session:
		var f *local.Session
		f, err = src.Fork(ctx, local.ForkOptions{NamePrefix: LocalPrefix, SessionID: sessionID, Logger: s.opts.logger()})
		if err == nil {
			fork = f
		}
	default:
		return nil, fmt.Errorf("fork %s: the %s backend cannot fork", s.Name(), s.backend)
	}
	if err != nil {
		return nil, err
	}
	w := wrap(s.backend, fork, s.opts)
	w.created(ctx)
	return w, nil
}
