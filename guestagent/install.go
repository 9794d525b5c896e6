//go:build linux

package guestagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// abandonedAfter is the age at which a copy staged beside the agent is
// taken for one whose host gave up: a host's replacement, copy and install
// together, lasts two minutes at most.
const abandonedAfter = 10 * time.Minute

// install puts the staged copy of an agent at staged in the place of the
// agent at path, by a rename: an agent running from path keeps running
// from its file, and every later start runs the new one. staged must be a
// regular file named PATH.SUFFIX beside path (where a host stages a newer
// agent), so that install renames nothing else.
//
// It then removes the copies staged beside path that changed before
// abandonedBefore: what a replacement cut short left.
func install(staged, path string, abandonedBefore time.Time) error {
	if !filepath.IsAbs(path) || filepath.Clean(staged) != staged || filepath.Dir(staged) != filepath.Dir(path) ||
		!strings.HasPrefix(filepath.Base(staged), filepath.Base(path)+".") {
		return fmt.Errorf("%s is not a copy staged beside %s (want %s.SUFFIX)", staged, path, path)
	}
	fi, err := os.Lstat(staged)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", staged)
	}
	if err := os.Rename(staged, path); err != nil {
		_ = os.Remove(staged)
		return err
	}
	// The rename lasts across a stop of the sandbox.
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return err
	}
	removeAbandoned(path, abandonedBefore)
	return nil
}

// removeAbandoned removes the regular files named PATH.new-SUFFIX beside
// path that last changed before t. What it cannot remove stays: the
// install itself is done.
func removeAbandoned(path string, t time.Time) {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+".new-"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		name := filepath.Join(dir, e.Name())
		var st syscall.Stat_t
		if syscall.Lstat(name, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		if time.Unix(st.Ctim.Unix()).Before(t) {
			_ = os.Remove(name)
		}
	}
}
