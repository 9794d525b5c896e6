package tools

import (
	"context"
	"errors"
	"path"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
)

var globTool = tool{
	description: "Find files in the workspace (or, with path, in /mnt/session/uploads) whose path matches a glob pattern (*, **, ?, [classes], {a,b}; an implicit **/ prefix, dotfiles included). Returns at most 100 paths, relative unless path is absolute, and a final bracketed line when more match. .git directories are searched only when the pattern names .git.",
	schema: schema{
		{name: "pattern", kind: kindString, required: true, description: "Glob pattern, e.g. *.md or src/**/*.go"},
		{name: "path", kind: kindString, description: "Directory to search in (default: /workspace; /mnt/session/uploads is allowed)"},
	},
	run: runGlob,
}

func runGlob(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	pattern, _ := a.str("pattern")
	compiled, err := glob.Compile(pattern)
	if err != nil {
		return "", &InputError{Tool: "glob", Msg: err.Error()}
	}
	paths := t.sess.Paths()
	ws := paths.Workspace
	p, hasPath := a.str("path")
	if !hasPath {
		p = ws
	}
	root, err := resolveIn("glob", p, ws, ws, paths.Uploads)
	if err != nil {
		return "", err
	}
	base := ws
	if hasPath && path.IsAbs(p) {
		base = ""
	}
	collector, err := glob.NewCollector(glob.EnumerationProtocol, glob.CollectorOptions{
		Root: root, Match: compiled.Match, Base: base,
	})
	if err != nil {
		return "", err
	}
	token := glob.NewToken("glob")
	t.record("glob")
	found, err := t.runSearch(ctx, search{
		tool:      "glob",
		work:      session.Command{Builtin: agentwire.BuiltinGlobEnumerate, Args: glob.EnumerationArgs(root, token, compiled.Narrowing())},
		cleanup:   session.Command{Builtin: agentwire.BuiltinSearchKill, Args: glob.CleanupArgs(glob.OwnerEnv, token)},
		readiness: glob.NewReadinessFilter(glob.EnumerationProtocol),
		collector: collector,
	})
	if errors.Is(err, glob.ErrLimit) {
		return "", &wrapped{msg: err.Error() + ". Narrow the search: set path to the directory to search (e.g. {\"path\": \"src\"}), or end the pattern with a file name pattern such as *.py.", err: err}
	}
	if err != nil {
		return "", err
	}
	return found.format("No files found", "Narrow the pattern, or set path to a subdirectory."), nil
}
