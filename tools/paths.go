package tools

import (
	"path"
	"strings"
)

// resolveIn turns an agent-supplied path (absolute, or relative to base)
// into a clean absolute guest path inside one of roots. It refuses empty
// paths, NUL bytes, `..` escapes and the prefix trick (/workspace-escape is
// not inside /workspace). It runs before any guest command.
func resolveIn(tool, p, base string, roots ...string) (string, error) {
	if p == "" {
		return "", inputErrorf(tool, "%s: path must not be empty", tool)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", inputErrorf(tool, "%s: path must not contain NUL bytes", tool)
	}
	abs := p
	if !path.IsAbs(p) {
		abs = path.Join(base, p)
	}
	abs = path.Clean(abs)
	for _, root := range roots {
		if within(abs, root) {
			return abs, nil
		}
	}
	return "", &InputError{
		Tool:   tool,
		Msg:    tool + ": path " + quote(p) + " escapes " + strings.Join(roots, ", "),
		escape: true,
	}
}

// within reports whether the clean absolute path p is root or below it.
func within(p, root string) bool {
	root = path.Clean(root)
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "\"" + s + "\""
}
