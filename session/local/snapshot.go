package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// MaxSnapshotBytes bounds the file content a session holds for Restore.
const MaxSnapshotBytes = 64 << 20

// Snapshot is the content of one workspace file at one moment, held by
// the session that took it.
type Snapshot struct {
	Path   string // as commands name it, e.g. /workspace/a.txt
	Digest string // sha256 of the content, hex
	Size   int64
}

// Snapshot records workspace files (absolute, or relative to the
// workspace). Symlinks, paths through symlinks, non-regular files and
// paths outside the workspace are refused.
func (s *Session) Snapshot(ctx context.Context, paths ...string) ([]Snapshot, error) {
	_, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	r, err := os.OpenRoot(s.dirs.Workspace)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := make([]Snapshot, 0, len(paths))
	for _, p := range paths {
		guest, rel, err := s.snapshotPath(r, p)
		if err != nil {
			return nil, err
		}
		data, err := readRegular(r, rel, MaxSnapshotBytes)
		if err != nil {
			return nil, fmt.Errorf("local sandbox: snapshot %s: %w", guest, err)
		}
		sum := sha256.Sum256(data)
		digest := hex.EncodeToString(sum[:])
		if err := s.keep(digest, data); err != nil {
			return nil, err
		}
		out = append(out, Snapshot{Path: guest, Digest: digest, Size: int64(len(data))})
	}
	return out, nil
}

// Restore writes snapshots back. Only content this session snapshotted is
// accepted, and paths are checked as for Snapshot, all before any is
// written; a missing file is created in an existing directory.
func (s *Session) Restore(ctx context.Context, snaps ...Snapshot) error {
	_, end, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	r, err := os.OpenRoot(s.dirs.Workspace)
	if err != nil {
		return err
	}
	defer r.Close()
	// Every snapshot is checked before any is written: one refused
	// changes nothing.
	type restore struct {
		Snapshot
		rel  string
		data []byte
	}
	todo := make([]restore, 0, len(snaps))
	for _, sn := range snaps {
		s.mu.Lock()
		data, owned := s.snaps[sn.Digest]
		s.mu.Unlock()
		if !owned {
			return &PolicyError{Field: "snapshot", Value: sn.Digest, Reason: "content is not owned by this session"}
		}
		_, rel, err := s.snapshotPath(r, sn.Path)
		if err != nil {
			return err
		}
		todo = append(todo, restore{Snapshot: sn, rel: rel, data: data})
	}
	for _, sn := range todo {
		data, rel := sn.data, sn.rel
		fi, err := r.Lstat(rel)
		created := os.IsNotExist(err)
		if err != nil && !created {
			return err
		}
		if !created && !fi.Mode().IsRegular() {
			return &EscapeError{Path: sn.Path, Root: s.paths.Workspace, Reason: "not a regular file"}
		}
		if created {
			fi = nil
		}
		f, err := openToReplace(r, rel, fi, 0o644)
		if err != nil {
			return fmt.Errorf("local sandbox: restore %s: %w", sn.Path, err)
		}
		_, werr := f.Write(data)
		if err := errors.Join(werr, f.Close()); err != nil {
			return fmt.Errorf("local sandbox: restore %s: %w", sn.Path, err)
		}
		if uid, gid, ok := s.plat.owner(s.dirs, filepath.Join(s.dirs.Workspace, rel)); ok && created {
			if err := r.Lchown(rel, uid, gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// openToReplace opens rel to be written and emptied: made anew with perm
// (never through a link) when Lstat found nothing there (fi nil), else the
// very regular file Lstat saw as fi. It opens without blocking, so a FIFO
// the guest put in the file's place meanwhile cannot hang the host, and
// nothing is truncated before the file is known to be that one.
func openToReplace(r *os.Root, rel string, fi os.FileInfo, perm os.FileMode) (*os.File, error) {
	if fi == nil {
		return r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NONBLOCK, perm)
	}
	f, err := r.OpenFile(rel, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	got, err := f.Stat()
	if err == nil && (!got.Mode().IsRegular() || !os.SameFile(fi, got)) {
		err = &EscapeError{Path: rel, Root: r.Name(), Reason: "replaced while it was written"}
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// snapshotPath jails p to the workspace and refuses any symlink on the
// way, so a snapshot never reads or writes through one.
func (s *Session) snapshotPath(r *os.Root, p string) (guest, rel string, err error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.paths.Workspace, p)
	}
	_, rel, err = jailPath(p, s.paths.Workspace)
	if err != nil {
		return "", "", err
	}
	if rel == "." {
		return "", "", &EscapeError{Path: p, Root: s.paths.Workspace, Reason: "the workspace itself is not a file"}
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for i := range parts {
		fi, err := r.Lstat(filepath.Join(parts[:i+1]...))
		if err != nil {
			break // missing from here on: Restore may create the last one
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return "", "", &EscapeError{Path: p, Root: s.paths.Workspace, Reason: "is or goes through a symbolic link"}
		}
	}
	return filepath.Join(s.paths.Workspace, rel), rel, nil
}

// readRegular reads a regular file of at most max bytes. It opens without
// blocking, so a FIFO put in a file's place cannot hang the host.
func readRegular(r *os.Root, rel string, max int64) ([]byte, error) {
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &PolicyError{Field: "snapshot", Value: rel, Reason: "not a regular file"}
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &PolicyError{Field: "snapshot", Value: rel, Reason: fmt.Sprintf("larger than %d bytes", max)}
	}
	return data, nil
}

// keep holds snapshot content for Restore, within MaxSnapshotBytes.
func (s *Session) keep(digest string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.snaps[digest]; ok {
		return nil
	}
	if s.snapBytes+int64(len(data)) > MaxSnapshotBytes {
		return fmt.Errorf("local sandbox %s: snapshots would hold more than %d bytes: %w", s.rec.Name, MaxSnapshotBytes, session.ErrInvalid)
	}
	if s.snaps == nil {
		s.snaps = map[string][]byte{}
	}
	s.snaps[digest] = data
	s.snapBytes += int64(len(data))
	return nil
}
