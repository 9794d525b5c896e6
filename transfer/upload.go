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
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Errors callers test with errors.Is.
var (
	ErrIntegrity = errors.New("upload failed integrity validation")
	ErrPath      = errors.New("unsafe session file path")
	ErrTooLarge  = errors.New("upload over its limit")
)

// Default upload limits: every byte is spooled on the host and then
// streamed into the guest, so a session's uploads are bounded as its
// outputs are.
const (
	DefaultMaxCallBytes    = 1 << 30
	DefaultMaxSessionBytes = 4 << 30
)

// Limits bound the bytes Materialize places (uploads and skills alike):
// PerCall in one call, PerSession across the calls sharing a Quota. Zero
// takes the default.
type Limits struct {
	PerCall, PerSession int64
}

// Quota counts the bytes one session's Materialize calls placed. It is
// safe for concurrent use; the zero value has the default Limits.
type Quota struct {
	Limits Limits
	mu     sync.Mutex
	used   int64
}

// reserve counts n bytes against q, or refuses them naming the limit.
func (q *Quota) reserve(n int64) error {
	call, sess := q.Limits.PerCall, q.Limits.PerSession
	if call <= 0 {
		call = DefaultMaxCallBytes
	}
	if sess <= 0 {
		sess = DefaultMaxSessionBytes
	}
	if n > call {
		return fmt.Errorf("%w: %d bytes in one call, over the per-call limit of %d bytes", ErrTooLarge, n, call)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.used+n > sess {
		return fmt.Errorf("%w: %d bytes after the %d already placed, over the per-session limit of %d bytes", ErrTooLarge, n, q.used, sess)
	}
	q.used += n
	return nil
}

// release gives back a reservation nothing was sent for.
func (q *Quota) release(n int64) {
	q.mu.Lock()
	q.used -= n
	q.mu.Unlock()
}

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

// agentUser owns the workspace on every backend (the msb session's prepare
// step and the local backend make it so; the image runs agents as it). It
// is named explicitly because a runtime whose default user is root must not
// extract skills as root either.
const agentUser = "65534"

// Materialize is Quota.Materialize with the default limits and a quota of
// its own: one call's bytes are bounded, a session's only by a Quota kept
// for it.
func Materialize(ctx context.Context, s session.Session, mounts []Mount) error {
	return new(Quota).Materialize(ctx, s, mounts)
}

// Materialize verifies every mount's size and sha256 while spooling it to a
// host temp file — before anything reaches the guest — then places them with
// ONE guest command per kind, the guest agent's extract builtin reading a
// tar stream on stdin: uploads as root below a root that is root's alone
// (nothing there is the agent's, so nothing it made can redirect a write),
// skills as the agent's user (the skills root lives in its workspace, where
// it may have planted links, so they are written with no more rights than
// it has). Nothing below the root is followed if it is a link;
// directories get mode 755, files 444, */scripts/* skill files 555. Mounts whose
// sizes add up past q's limits are refused with ErrTooLarge before any is
// read.
func (q *Quota) Materialize(ctx context.Context, s session.Session, mounts []Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	paths := s.Paths()

	// Every path and the total size are checked before any content is read.
	guests := make([]string, len(mounts))
	seen := map[string]bool{}
	var total int64
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
		if total += m.Size; total < 0 {
			total = math.MaxInt64
		}
	}
	// A file where another mount needs a directory would be replaced by
	// that directory in the guest, and the call would still succeed.
	for i, guest := range guests {
		root := rootOf(mounts[i].Kind, paths)
		for dir := path.Dir(guest); len(dir) > len(root); dir = path.Dir(dir) {
			if seen[dir] {
				return fmt.Errorf("mount %d: %w: %s is below %s, which is given as a file", i, ErrPath, guest, dir)
			}
		}
	}
	if err := q.reserve(total); err != nil {
		return fmt.Errorf("materialize %d files: %w", len(mounts), err)
	}
	sent := false
	defer func() {
		if !sent {
			q.release(total)
		}
	}()
	spool, err := os.MkdirTemp("", "oma-uploads-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(spool)
	byKind := map[Kind][]spooled{}
	for i, m := range mounts {
		host := filepath.Join(spool, fmt.Sprintf("%d", i))
		if err := spoolVerified(host, m); err != nil {
			return fmt.Errorf("mount %d (%s): %w", i, guests[i], err)
		}
		root := rootOf(m.Kind, paths)
		byKind[m.Kind] = append(byKind[m.Kind], spooled{rel: strings.TrimPrefix(guests[i], root+"/"), host: host, size: m.Size})
	}
	sent = true // from here on the guest may hold some of it
	for _, k := range []Kind{Upload, Skill} {
		if files := byKind[k]; len(files) > 0 {
			if err := place(ctx, s, k, rootOf(k, paths), files); err != nil {
				return err
			}
		}
	}
	return nil
}

// place extracts one kind's files below root with one guest command.
func place(ctx context.Context, s session.Session, k Kind, root string, files []spooled) error {
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	kind, user := "uploads", "0"
	if k == Skill {
		kind, user = "skills", agentUser
	}
	var size int64
	for _, f := range files {
		size += f.size + tarOverhead
	}
	dl, ctx, cancel := withDeadlines(ctx, "the upload", size)
	defer cancel(nil)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, files)) }()
	defer pr.Close() // unblocks the writer if the guest stopped reading
	res, err := s.Shell(ctx, session.Command{Builtin: agentwire.BuiltinExtract, Args: []string{kind, root}},
		session.ShellOptions{Stdin: &progressReader{r: pr, d: dl}, User: user, GuestTimeout: dl.guestTimeout()})
	if cause := context.Cause(ctx); dl.ended(cause) {
		return fmt.Errorf("materialize %d %s files: %w", len(files), k, cause)
	}
	if err != nil {
		return fmt.Errorf("materialize %d %s files: %w", len(files), k, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("materialize %d %s files: guest exit %d: %s", len(files), k, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

type spooled struct {
	rel, host string // rel: below the kind's root, '/'-separated
	size      int64
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
// their root, each file's missing parent directories first (the root
// itself exists and keeps its owner and mode).
func writeTar(w io.Writer, files []spooled) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, f := range files {
		if err := writeParents(tw, path.Dir(f.rel), dirs); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.rel, Size: f.size, Mode: 0o444}); err != nil {
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

func writeParents(tw *tar.Writer, dir string, done map[string]bool) error {
	if dir == "." || done[dir] {
		return nil
	}
	if err := writeParents(tw, path.Dir(dir), done); err != nil {
		return err
	}
	done[dir] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755})
}
