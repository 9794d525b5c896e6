// Package transfer moves files into and out of a session: uploads and skill
// files materialized before the agent starts, and the output files the
// agent leaves for its caller. Both are written once against
// session.Session, and each costs a fixed number of round trips however
// many files move.
package transfer

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Errors callers test with errors.Is.
var (
	ErrIntegrity = errors.New("upload failed integrity validation")
	ErrPath      = errors.New("unsafe session file path")
)

// Kind says where a mount lands.
type Kind string

const (
	Upload Kind = "upload" // under the uploads root, read-only to the agent
	Skill  Kind = "skill"  // under the skills root; */scripts/* executable
)

// Mount is one file to place in the session. Path is the absolute guest
// path; Size and SHA256 are what Content must turn out to be.
type Mount struct {
	Kind    Kind
	Path    string
	Size    int64
	SHA256  string
	Content io.Reader
}

// materializeScript extracts the tar on stdin into / as root and sets the
// modes agents rely on: uploads dirs 755 / files 444; skills the same with
// */scripts/* 555.
const materializeScript = `set -eu
uploads=$1 skills=$2
mkdir -p -- "$uploads" "$skills"
tar -x --no-same-owner --no-same-permissions -C / -f -
find "$uploads" "$skills" -type d -exec chmod 755 {} +
find "$uploads" "$skills" -type f -exec chmod 444 {} +
find "$skills" -path '*/scripts/*' -type f -exec chmod 555 {} +
`

// Materialize verifies every mount's size and sha256 while spooling it to a
// host temp file — before anything reaches the guest — then places them all
// with ONE guest command (a tar stream on stdin), as root.
func Materialize(ctx context.Context, s session.Session, mounts []Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	paths := s.Paths()
	spool, err := os.MkdirTemp("", "oma-uploads-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(spool)

	// Every path is checked before any content is read.
	guests := make([]string, len(mounts))
	seen := map[string]bool{}
	for i, m := range mounts {
		guest, err := mountPath(m, paths)
		if err != nil {
			return fmt.Errorf("mount %d: %w", i, err)
		}
		if seen[guest] {
			return fmt.Errorf("mount %d: %w: %s is given twice", i, ErrPath, guest)
		}
		seen[guest] = true
		guests[i] = guest
	}
	files := make([]spooled, 0, len(mounts))
	for i, m := range mounts {
		host := filepath.Join(spool, fmt.Sprintf("%d", i))
		if err := spoolVerified(host, m); err != nil {
			return fmt.Errorf("mount %d (%s): %w", i, guests[i], err)
		}
		files = append(files, spooled{guest: guests[i], host: host, size: m.Size, root: rootOf(m.Kind, paths)})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].guest < files[j].guest })

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, files)) }()
	defer pr.Close() // unblocks the writer if the guest stopped reading
	res, err := s.Shell(ctx, session.Command{Script: materializeScript, Args: []string{paths.Uploads, paths.Skills}},
		session.ShellOptions{Stdin: pr, User: "0"})
	if err != nil {
		return fmt.Errorf("materialize %d files: %w", len(files), err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("materialize %d files: guest exit %d: %s", len(files), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

type spooled struct {
	guest, host, root string
	size              int64
}

func rootOf(k Kind, p session.Paths) string {
	if k == Skill {
		return p.Skills
	}
	return p.Uploads
}

// mountPath jails a mount's guest path to its kind's root and refuses
// anything that is not a plain file path below it.
func mountPath(m Mount, p session.Paths) (string, error) {
	if m.Kind != Upload && m.Kind != Skill {
		return "", fmt.Errorf("%w: unknown mount kind %q (want upload or skill)", ErrPath, m.Kind)
	}
	root := rootOf(m.Kind, p)
	if !path.IsAbs(m.Path) || strings.IndexByte(m.Path, 0) >= 0 {
		return "", fmt.Errorf("%w: %q must be an absolute path", ErrPath, m.Path)
	}
	clean := path.Clean(m.Path)
	if !strings.HasPrefix(clean, root+"/") {
		return "", fmt.Errorf("%w: %q escapes %s", ErrPath, m.Path, root)
	}
	if m.Size < 0 || len(m.SHA256) != 64 {
		return "", fmt.Errorf("%w: %q needs a size and a sha256", ErrIntegrity, m.Path)
	}
	return clean, nil
}

// spoolVerified copies the content to host while hashing it, and fails if
// it is not exactly Size bytes with digest SHA256. Reading stops one byte
// past Size, so an oversized stream costs no more than that.
func spoolVerified(host string, m Mount) error {
	if m.Content == nil {
		return fmt.Errorf("%w: no content", ErrIntegrity)
	}
	f, err := os.OpenFile(host, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(m.Content, m.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n != m.Size {
		return fmt.Errorf("%w: size mismatch: expected %d bytes, got %s", ErrIntegrity, m.Size, sizeSeen(n, m.Size))
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, m.SHA256) {
		return fmt.Errorf("%w: sha256 mismatch", ErrIntegrity)
	}
	return nil
}

func sizeSeen(n, want int64) string {
	if n > want {
		return "more"
	}
	return fmt.Sprint(n)
}

// writeTar streams the spooled files as a tar archive of paths relative to
// /, with their parent directories below the mount root first (the roots
// themselves exist and keep their owner and mode).
func writeTar(w io.Writer, files []spooled) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, f := range files {
		if err := writeParents(tw, f.root, path.Dir(f.guest), dirs); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.guest, "/"), Size: f.size, Mode: 0o444}); err != nil {
			return err
		}
		src, err := os.Open(f.host)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeParents(tw *tar.Writer, root, dir string, done map[string]bool) error {
	if dir == root || !strings.HasPrefix(dir, root+"/") || done[dir] {
		return nil
	}
	if err := writeParents(tw, root, path.Dir(dir), done); err != nil {
		return err
	}
	done[dir] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: 0o755})
}
