package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Fork makes a new session whose root disk and workspace are copies of
// this one's at this moment. The source is paused (msb stop), since msb
// snapshots only a stopped sandbox and nothing may write the workspace
// volume while it is copied; it is resumed afterwards only if it was
// running.
//
// The root disk: `msb snapshot create` of the source, under a name of our
// grammar (session.SnapshotName, labelled with the owner labels and
// LabelParent), then `msb create --conf` with a file naming that snapshot
// (0.6.18's create takes no --from-snapshot; `run -d --from-snapshot`
// would stop the fork as soon as the image's command ended). msb gives the
// fork a private copy of the snapshot's disk, so the snapshot is removed
// as soon as the fork's create returned, whatever it returned; the reaper
// removes one a crash left. The snapshot pins the source's image: an
// o.Image naming another is refused. msb refuses --copy-file with a
// snapshot, so the fork gets no agent of its own: when the source had one,
// the fork runs the copy its disk inherited (labelled LabelAgent, so the
// channel opens for it), as much the guest's as the disk's bash; else one
// msb exec per call.
//
// The workspace: copied host-side from the source's volume into the
// fork's new one, never following a guest's symlink (see
// safefs.CopyTree), keeping hard links and holes, at most
// session.MaxForkCopyBytes of file data; devices, FIFOs and sockets are
// skipped. Only dir
// volumes, which are host directories, can be copied: any other kind is
// refused.
//
// o names the fork: SessionID is required; the workspace id, CPUs and
// memory default to the source's, the rest to Create's defaults (the
// network policy too: the zero value denies all). The fork carries
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
	if o.Image != "" && o.Image != info.Image {
		return nil, fmt.Errorf("%w: fork %s: image %q: a fork boots from a snapshot of its source, whose image is %q", session.ErrInvalid, s.names.Sandbox, o.Image, info.Image)
	}
	if !hasAgent(info) {
		// The fork's disk is a snapshot of the source's: msb places no file in it.
		return nil, fmt.Errorf("fork %s: %w: its sandbox was created without one", s.names.Sandbox, session.ErrNoAgent)
	}
	wasRunning := !msb.Stopped(info.Status)
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

// forkStopped snapshots the stopped source's root disk, creates the fork
// from it and copies the source's workspace volume into the fork's.
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
	if o.CPUs == 0 {
		o.CPUs = info.CPUs
	}
	if o.Memory == "" && info.MemoryMiB > 0 {
		o.Memory = fmt.Sprintf("%dM", info.MemoryMiB)
	}
	o.parent = s.names.Sandbox
	// The agent the source's create placed, or the one its own root disk
	// inherited, is in the disk the fork gets.
	o.setDefaults()
	snapshot, err := s.snapshotRootDisk(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", s.names.Sandbox, err)
	}
	fork, err := s.createFromSnapshot(ctx, o, snapshot)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", s.names.Sandbox, err)
	}
	dstDir, err := fork.volumeDir(ctx, fork.names.Volume)
	if err != nil {
		return fork, fmt.Errorf("fork %s: %w", s.names.Sandbox, err)
	}
	skipped, err := safefs.CopyTree(ctx, srcDir, dstDir, session.MaxForkCopyBytes)
	if err != nil {
		return fork, fmt.Errorf("fork %s: workspace: %w", s.names.Sandbox, err)
	}
	if len(skipped) > 0 {
		s.logger.Info("fork skipped special files", "fork", fork.names.Sandbox, "paths", skipped)
	}
	return fork, nil
}

// snapshotRootDisk snapshots the stopped source under a name of our
// grammar and returns that name. o has its defaults set.
func (s *Session) snapshotRootDisk(ctx context.Context, o Options) (string, error) {
	name := session.SnapshotName(session.NewNames(o.Prefix, o.WorkspaceID, o.SessionID, o.Now(), o.Random()).Stem)
	labels := append(session.OwnerLabels(),
		msb.Label{Key: session.LabelSessionID, Value: o.SessionID},
		msb.Label{Key: session.LabelParent, Value: s.names.Sandbox},
	)
	// msb copies the whole root disk: as slow as a create.
	sctx, cancel := context.WithTimeout(ctx, o.StartupTimeout)
	defer cancel()
	err := s.client.SnapshotCreate(sctx, msb.SnapshotCreateOptions{Name: name, From: s.names.Sandbox, Labels: labels, Quiet: true})
	if err == nil {
		return name, nil
	}
	// A create cut short (a deadline, a cancel) may have finished its
	// artifact; one that exists already is not this call's to remove.
	if !errors.Is(err, msb.ErrAlreadyExists) {
		s.removeSnapshot(ctx, name)
	}
	_, mapped := shellResult(nil, err)
	return "", fmt.Errorf("snapshot the root disk: %w", mapped)
}

// createFromSnapshot creates the fork from the snapshot, through a conf
// file in a private temporary directory, then removes the snapshot,
// whatever the create did: msb gave the fork its own copy of the disk.
func (s *Session) createFromSnapshot(ctx context.Context, o Options, snapshot string) (*Session, error) {
	// The fork is whole either way.
	defer s.removeSnapshot(ctx, snapshot)
	dir, err := os.MkdirTemp("", "oma-fork-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if o.conf, err = msb.WriteSnapshotConf(dir, snapshot); err != nil {
		return nil, err
	}
	return Create(ctx, o)
}

// removeSnapshot removes a fork's snapshot even when ctx has ended; one
// that cannot be removed (and is still there) is left to the reaper.
func (s *Session) removeSnapshot(ctx context.Context, name string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inspectTimeout)
	defer cancel()
	if err := s.client.SnapshotRemove(rctx, name); err != nil && !errors.Is(err, msb.ErrSnapshotNotFound) {
		s.logger.Warn("fork snapshot not removed; left to the reaper", "snapshot", name, "err", err)
	}
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
