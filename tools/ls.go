package tools

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/text/collate"
	"golang.org/x/text/language"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
)

const lsDefaultLimit = 500

var lsTool = tool{
	description: "List a directory in the workspace or in /mnt/session/uploads: entries sorted case-insensitively, directories suffixed with /, dotfiles included, at most limit entries (default 500) or 50KB.",
	schema: schema{
		{name: "path", kind: kindString, description: "Directory to list (default: /workspace)"},
		{name: "limit", kind: kindInteger, description: "Maximum number of entries to return (default: 500)", min: 1, max: 1 << 31},
	},
	run: runLs,
}

func runLs(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	paths := t.sess.Paths()
	p, ok := a.str("path")
	if !ok {
		p = paths.Workspace
	}
	abs, err := resolveIn("ls", p, paths.Workspace, paths.Workspace, paths.Uploads)
	if err != nil {
		return "", err
	}
	limit, ok := a.integer("limit")
	if !ok {
		limit = lsDefaultLimit
	}
	t.record("ls")
	// The ls builtin prints NUL-terminated "TYPE NAME" records, TYPE being d
	// for a directory (following symlinks, as stat does) and f otherwise. An
	// entry removed between its read of the directory and its stat (a
	// concurrent write's temporary file) is left out, not an error.
	res, err := t.shell(ctx, session.Command{Builtin: agentwire.BuiltinLs, Args: []string{abs, p}}, session.ShellOptions{})
	if err != nil {
		return "", fmt.Errorf("ls %s: %w", p, err)
	}
	if res.ExitCode != 0 {
		return "", guestError("ls", p, res)
	}
	return formatLs(res.Stdout, int(limit)), nil
}

// lsEntry is one listed name and whether it is a directory.
type lsEntry struct {
	name string
	dir  bool
}

func formatLs(listing []byte, limit int) string {
	var entries []lsEntry
	for _, rec := range bytes.Split(listing, []byte{0}) {
		kind, name, ok := bytes.Cut(rec, []byte{' '})
		if !ok || len(name) == 0 || bytes.IndexByte(name, '/') >= 0 || bytes.HasPrefix(name, []byte(glob.WriteTempPrefix)) {
			continue
		}
		entries = append(entries, lsEntry{name: string(name), dir: string(kind) == "d"})
	}
	if len(entries) == 0 {
		return "(empty directory)"
	}
	sortNames(entries)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = glob.Display(e.name)
		if e.dir {
			names[i] += "/"
		}
	}
	var notes []string
	if len(names) > limit {
		names = names[:limit]
		notes = append(notes, fmt.Sprintf("%d entries limit reached. Use limit=%d for more", limit, limit*2))
	}
	var kept []string
	size := 0
	for i, n := range names {
		add := len(n)
		if i > 0 {
			add++
		}
		if size+add > readMaxBytes {
			notes = append(notes, bashproto.FormatSize(readMaxBytes)+" limit reached")
			break
		}
		size += add
		kept = append(kept, n)
	}
	out := strings.Join(kept, "\n")
	if len(notes) > 0 {
		out += "\n\n[" + strings.Join(notes, ". ") + "]"
	}
	return out
}

// sortNames orders entries as agent tools do: bare names (without the
// directory slash), lower-cased, by a locale-aware comparison (accents are
// secondary: été sorts with the e's), byte order breaking ties so that the
// order is total.
func sortNames(entries []lsEntry) {
	c := collate.New(language.Und)
	var buf collate.Buffer
	keys := make(map[string][]byte, len(entries))
	for _, e := range entries {
		keys[e.name] = c.KeyFromString(&buf, strings.ToLower(e.name))
	}
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i].name, entries[j].name
		if k := bytes.Compare(keys[a], keys[b]); k != 0 {
			return k < 0
		}
		return a < b
	})
}
