package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// PathWithoutPerl is a PATH of one directory that holds every program of
// the current PATH but perl, for running a guest script's path for images
// without perl.
func PathWithoutPerl(t testing.TB) string {
	t.Helper()
	bin := t.TempDir()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "perl") {
				continue
			}
			err := os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(bin, e.Name()))
			if err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
		}
	}
	return bin
}
