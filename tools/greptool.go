package tools

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/grep"
	"github.com/oma-sandbox/oma-sandbox/session"
)

var grepTool = tool{
	description: "Search file contents with a ripgrep regex under an absolute path (/workspace, /mnt/session/uploads or /workspace/skills). Returns the absolute paths of matching files in path order (binary files skipped), at most head_limit (default 100), and a final bracketed line when more match or some paths could not be searched.",
	schema: schema{
		{name: "pattern", kind: kindString, required: true, description: "Regular expression (ripgrep syntax)",
			missing: "grep pattern is required", invalid: "grep pattern is required"},
		{name: "path", kind: kindString, required: true, description: "Absolute directory or file to search",
			missing: "grep path must be absolute", invalid: "grep path must be absolute"},
		{name: "glob", kind: kindString, description: "Only search files whose path matches this glob",
			invalid: "grep glob must be a non-empty string"},
		{name: "context", kind: kindInteger, description: "Accepted for compatibility and ignored", min: 0, max: 100,
			invalid: "grep context must be an integer from 0 through 100"},
		{name: "head_limit", kind: kindInteger, description: "Maximum number of files to return (1-100, default 100)", min: 1, max: 100,
			invalid: "grep head_limit must be an integer from 1 through 100"},
	},
	run: runGrep,
}

func runGrep(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	pattern, _ := a.str("pattern")
	if pattern == "" {
		return "", inputErrorf("grep", "grep pattern is required")
	}
	if len(pattern) > grep.MaxPatternBytes {
		return "", inputErrorf("grep", "grep pattern exceeds %d bytes", grep.MaxPatternBytes)
	}
	p, _ := a.str("path")
	if !path.IsAbs(p) {
		return "", inputErrorf("grep", "grep path must be absolute")
	}
	if len(p) > grep.MaxPathBytes {
		return "", inputErrorf("grep", "grep path exceeds %d bytes", grep.MaxPathBytes)
	}
	var match func(string) bool
	rgGlob := ""
	if g, ok := a.str("glob"); ok {
		if g == "" {
			return "", inputErrorf("grep", "grep glob must be a non-empty string")
		}
		compiled, err := glob.Compile(g)
		if err != nil {
			return "", &InputError{Tool: "grep", Msg: err.Error()}
		}
		// The host re-checks every hit with the dialect's own automaton;
		// ripgrep gets the glob only where its syntax agrees, to narrow the
		// search (it rejects nested braces, for one).
		match = compiled.Match
		if ripgrepSafe(g) {
			rgGlob = glob.ToRipgrep(g)
		}
	}
	paths := t.sess.Paths()
	root, err := resolveIn("grep", p, paths.Workspace, paths.Workspace, paths.Uploads, paths.Skills)
	if err != nil {
		return "", err
	}
	headLimit, ok := a.integer("head_limit")
	if !ok {
		headLimit = grep.DefaultHeadLimit
	}
	collector, err := grep.NewCollector(grep.CollectorOptions{Root: root, HeadLimit: int(headLimit), Match: match})
	if err != nil {
		return "", err
	}
	token := grep.NewToken()
	t.record("grep")
	found, err := t.runSearch(ctx, search{
		tool:      "grep",
		work:      session.Command{Builtin: agentwire.BuiltinGrepSearch, Args: grep.SearchArgs(root, token, pattern, rgGlob)},
		cleanup:   session.Command{Builtin: agentwire.BuiltinSearchKill, Args: grep.CleanupArgs(token)},
		readiness: grep.NewReadinessFilter(),
		collector: collector,
	})
	if err != nil {
		return "", err
	}
	more := "Narrow path or glob"
	if headLimit < grep.DefaultHeadLimit {
		more = fmt.Sprintf("Raise head_limit (at most %d), or narrow path or glob.", grep.DefaultHeadLimit)
	} else {
		more += "."
	}
	return found.format("No matches found", more), nil
}

// ripgrepSafe reports whether ripgrep reads pattern as the dialect does: no
// escapes, no nested braces, and ** only as a whole path segment.
func ripgrepSafe(pattern string) bool {
	if strings.Contains(pattern, `\`) {
		return false
	}
	depth := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '{':
			depth++
			if depth > 1 {
				return false
			}
		case '}':
			depth--
		case '*':
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				before := i == 0 || pattern[i-1] == '/'
				after := i+2 == len(pattern) || pattern[i+2] == '/'
				if !before || !after {
					return false
				}
				i++
			}
		}
	}
	return true
}
