package local

import (
	"os"
	"path/filepath"
	"strings"
)

// within reports whether p is root or lies below it, lexically; both are
// cleaned absolute paths.
func within(p, root string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// jailPath checks an absolute path as commands name it against the roots
// it may fall in, and returns the root and the path relative to it. `..`
// segments are refused outright rather than resolved, and a sibling that
// merely shares a prefix (/workspace-escape) is outside /workspace.
func jailPath(p string, roots ...string) (root, rel string, err error) {
	refuse := func(reason string) (string, string, error) {
		return "", "", &EscapeError{Path: p, Root: strings.Join(roots, ", "), Reason: reason}
	}
	if !filepath.IsAbs(p) {
		return refuse("not an absolute path")
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == os.PathSeparator }) {
		if seg == ".." {
			return refuse("contains a .. segment")
		}
	}
	clean := filepath.Clean(p)
	for _, r := range roots {
		if within(clean, r) && len(r) > len(root) {
			root = r
		}
	}
	if root == "" {
		return refuse("outside every session directory")
	}
	rel, _ = filepath.Rel(root, clean)
	return root, rel, nil
}
