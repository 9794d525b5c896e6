package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CacheDir is the private directory agent copies are kept in:
// oma-sandbox/agent under the user's cache directory.
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "oma-sandbox", "agent"), nil
}

// Cached returns the path of a private copy of bin in dir, named by its
// SHA-256, for a sandbox to be given (msb's create copies it into the
// guest; a local sandbox binds it read-only). The directory must be ours and
// closed to others; an existing copy is reused only when it is a regular
// file of ours, mode 0755, whose content hashes to its name; anything else
// is replaced atomically (write, sync, rename).
func Cached(dir string, bin []byte) (string, error) {
	sum := sha256.Sum256(bin)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := checkPrivateDir(dir); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "oma-guest-agent-"+hex.EncodeToString(sum[:16]))
	if ok, err := verifyAgent(path, sum); ok || err != nil {
		return path, err
	}
	if err := place(dir, path, bytes.NewReader(bin), 0o755); err != nil {
		return "", err
	}
	return path, nil
}

// checkPrivateDir refuses a cache directory that is a symlink, not ours,
// or open to group or others: whoever could write it could choose what
// runs as root in every new sandbox.
func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir():
		return fmt.Errorf("agent cache %s is not a directory", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("agent cache %s has mode %v; it must be closed to group and others", dir, fi.Mode().Perm())
	case !ownedByUs(fi):
		return fmt.Errorf("agent cache %s does not belong to this process's user", dir)
	}
	return nil
}

// verifyAgent reports whether path is a regular file of ours, mode 0755,
// whose content hashes to sum. A missing file is not an error; anything
// else that cannot be reused is removed so that a fresh copy takes its
// place.
func verifyAgent(path string, sum [32]byte) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNoFollow, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, os.Remove(path)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 || !ownedByUs(fi) {
		return false, os.Remove(path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	if !bytes.Equal(h.Sum(nil), sum[:]) {
		return false, os.Remove(path)
	}
	return true, nil
}

// SelfCached returns the path of a private copy of the running program in
// dir, with mode, for a program that serves as its own guest agent (a
// build without the bundled one). The local backend binds an
// execute-only copy (0111): a sandbox's commands can run it but not read
// it, and the program may hold what they must not see; msb, which reads
// the copy to place it in the guest with its mode, gets one only its owner
// may read and run (0500). The copy is of the program running, read
// through /proc/self/exe where there is one: a program replaced on disk
// since it started (an upgrade under a long-lived server) is not copied in
// its place. A copy is named by that file's identity (device and inode),
// size and modification time and by its mode, so a rebuilt program gets a
// copy of its own; an existing copy is reused when it is a regular file of
// ours with that mode and the program's size (the directory, closed to
// others, is checked first).
func SelfCached(dir string, mode os.FileMode) (string, error) {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		if src, err = os.Open(self); err != nil {
			return "", err
		}
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return "", err
	}
	id := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%o", fileIdentity(fi), fi.Size(), fi.ModTime().UnixNano(), mode))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := checkPrivateDir(dir); err != nil {
		return "", err
	}
	path := filepath.Join(dir, selfPrefix+hex.EncodeToString(id[:16]))
	now := time.Now()
	if cur, err := os.Lstat(path); err == nil {
		if cur.Mode().IsRegular() && cur.Mode().Perm() == mode && ownedByUs(cur) && cur.Size() == fi.Size() {
			// Its time says when it was last asked for (pruneSelf).
			_ = os.Chtimes(path, now, now)
			return path, nil
		}
		if err := os.Remove(path); err != nil {
			return "", err
		}
	}
	if err := place(dir, path, src, mode); err != nil {
		return "", err
	}
	pruneSelf(dir, path, now)
	return path, nil
}

const (
	selfPrefix = "oma-sandbox-self-"
	// selfUnused is how long a copy of a program may go unasked for before
	// the next copy placed removes it: every build of a program gets a
	// copy of its own, some tens of MiB each.
	selfUnused = 7 * 24 * time.Hour
)

// pruneSelf removes, from dir, the copies of programs other than keep that
// no one asked for in selfUnused: regular files of ours only. A process
// still using one places it again when it finds it gone (SelfCached, from
// the program running).
func pruneSelf(dir, keep string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if !strings.HasPrefix(e.Name(), selfPrefix) || p == keep {
			continue
		}
		fi, err := os.Lstat(p)
		if err == nil && fi.Mode().IsRegular() && ownedByUs(fi) && now.Sub(fi.ModTime()) > selfUnused {
			_ = os.Remove(p)
		}
	}
}

// place writes r to path atomically with mode: a temporary file in dir,
// synced, then renamed over path.
func place(dir, path string, r io.Reader, mode os.FileMode) error {
	tmp, err := os.CreateTemp(dir, ".agent-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = io.Copy(tmp, r)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return err
}
