//go:build linux

package guestagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// install puts the staged copy of an agent at staged in the place of the
// agent at path, by a rename: an agent running from path keeps running
// from its file, and every later start runs the new one. staged must be a
// regular file named PATH.SUFFIX beside path (where a host stages a newer
// agent), so that install renames nothing else.
func install(staged, path string) error {
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
	return dir.Sync()
}
