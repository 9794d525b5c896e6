package microvm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Fork makes a new session whose workspace is a copy of this one's at this
// moment. The source is paused (msb stop) so that nothing writes its
// workspace volume while it is copied, host-side, into the fork's volume;
// it is resumed afterwards only if it was running. The copy never follows
// a guest's symlink (see safefs.CopyTree); devices, FIFOs and sockets are
// skipped. Only dir volumes, which are host directories, can be copied:
// any other kind is refused.
//
// The fork boots from the same image (o.Image, else the source's), not
// from a snapshot of the source's root disk: msb 0.6.18 snapshots a
// stopped sandbox but its `create` takes no --from-snapshot, and the root
// disk holds nothing of the agent's persistent state, which lives in the
// workspace. o names the fork: SessionID is required; the workspace id,
// CPUs and memory default to the source's, the rest to Create's defaults
// (the network policy too: the zero value denies all). The fork carries
// LabelParent naming this sandbox; the two share nothing afterwards.
func (s *Session) Fork(ctx context.Context, o Options) (*Session, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if o.SessionID == "" {
		return nil, fmt.Errorf("%w: a fork needs a session id of its own", session.ErrInvalid)
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	info, err := s.client.Inspect(ictx, s.names.Sandbox)
	cancel()
	if err != nil {
		_, mapped := shellResult(nil, err)
		return nil, fmt.Errorf("fork %s: %w", s.names.Sandbox, mapped)
	}
	wasRunning := !stoppedStatus(info.Status)
	if wasRunning {
		if err := s.stop(ctx); err != nil {
			return nil, fmt.Errorf("fork %s: pause the source: %w", s.names.Sandbox, err)
		}
	}
	s.life.state = statePaused
	fork, err := s.forkStopped(ctx, o, info)
	if wasRunning {
		if rerr := s.start(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("fork %s: resume the source: %w", s.names.Sandbox, rerr))
		}
	}
	if err != nil && fork != nil {
		if cerr := fork.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, cerr)
		}
		fork = nil
	}
	return fork, err
}

// forkStopped creates the fork and copies the stopped source's workspace
// volume into the fork's.
func (s *Session) forkStopped(ctx context.Context, o Options, info *msb.SandboxInfo) (*Session, error) {
	srcDir, err := s.volumeDir(ctx, s.names.Volume)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", s.names.Sandbox, err)
	}
	if o.Client == nil {
		o.Client = s.client
	}
	if o.Logger == nil {
		o.Logger = s.logger
	}
	if o.WorkspaceID == "" {
		o.WorkspaceID = info.Labels[session.LabelWorkspaceID]
	}
	if o.Image == "" {
		o.Image = info.Image
	}
	if o.CPUs == 0 {
		o.CPUs = info.CPUs
	}
	if o.Memory == "" && info.MemoryMiB > 0 {
		o.Memory = fmt.Sprintf("%dM", info.MemoryMiB)
	}
	o.parent = s.names.Sandbox
	fork, err := Create(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", s.names.Sandbox, err)
	}
	dstDir, err := fork.volumeDir(ctx, fork.names.Volume)
	if err != nil {
		return fork, fmt.Errorf("fork %s: %w", s.names.Sandbox, err)
	}
	skipped, err := safefs.CopyTree(ctx, srcDir, dstDir)
	if err != nil {
		return fork, fmt.Errorf("fork %s: workspace: %w", s.names.Sandbox, err)
	}
	if len(skipped) > 0 {
		s.logger.Info("fork skipped special files", "fork", fork.names.Sandbox, "paths", skipped)
	}
	return fork, nil
}

// volumeDir is the host directory of a dir volume, from msb volume
// inspect; any other kind of volume is refused.
func (s *Session) volumeDir(ctx context.Context, volume string) (string, error) {
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	text, err := s.client.VolumeInspect(ictx, volume)
	cancel()
	if err != nil {
		_, mapped := shellResult(nil, err)
		return "", fmt.Errorf("volume %s: %w", volume, mapped)
	}
	fields := inspectFields(text)
	if kind := fields["Kind"]; kind != "dir" {
		return "", fmt.Errorf("%w: volume %s is of kind %q; only a dir volume (a host directory) can be copied", session.ErrInvalid, volume, kind)
	}
	path := fields["Path"]
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return "", fmt.Errorf("%w: msb volume inspect %s gave path %q, not a clean absolute path", msb.ErrMalformedOutput, volume, path)
	}
	return path, nil
}

// inspectFields reads msb volume inspect's "Key:   value" lines.
func inspectFields(text string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && k != "" && !strings.ContainsAny(k, " \t") {
			if _, seen := fields[k]; !seen {
				fields[k] = strings.TrimSpace(v)
			}
		}
	}
	return fields
}
