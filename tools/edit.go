package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// editMaxBytes bounds the file an edit reads into host memory.
const editMaxBytes = 16 << 20

var editTool = tool{
	description: "Edit a file in the workspace by exact text replacement. Each oldText must occur exactly once in the file and edits must not overlap; otherwise nothing is changed.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to edit (absolute, or relative to /workspace)"},
		{name: "edits", kind: kindEdits, description: "Replacements applied to the original file"},
		{name: "oldText", kind: kindString, description: "Legacy single replacement: text to replace (use edits)"},
		{name: "newText", kind: kindString, description: "Legacy single replacement: replacement text (use edits)"},
	},
	run: runEdit,
}

// catScript prints a regular file, or fails with a message naming it.
const catScript = `f=$1
if [ ! -e "$f" ]; then printf 'File not found: %s\n' "$2" >&2; exit 3; fi
if [ ! -f "$f" ]; then printf 'Not a regular file: %s\n' "$2" >&2; exit 3; fi
exec cat -- "$f"
`

func runEdit(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	edits, err := editsOf(p, a)
	if err != nil {
		return "", err
	}
	paths := t.sess.Paths()
	abs, err := resolveIn("edit", p, paths.Workspace, paths.Workspace)
	if err != nil {
		return "", err
	}
	t.record("edit")
	res, err := t.shell(ctx, session.Command{Script: catScript, Args: []string{abs, p}},
		session.ShellOptions{MaxOutput: editMaxBytes})
	if err != nil {
		if errors.Is(err, session.ErrOutputOverflow) {
			return "", fmt.Errorf("Could not edit file: %s. The file is larger than %s.", p, formatSize(editMaxBytes))
		}
		return "", fmt.Errorf("edit %s: %w", p, err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("Could not edit file: %s. %w", p, guestError("edit", p, res))
	}
	original := string(res.Stdout)
	updated, err := applyEdits(original, edits)
	if err != nil {
		return "", fmt.Errorf("Could not edit file: %s. %w", p, err)
	}
	sum := sha256.Sum256(res.Stdout)
	if err := t.writeFile(ctx, abs, updated, hex.EncodeToString(sum[:])); err != nil {
		var g *GuestError
		if errors.As(err, &g) && g.ExitCode == conflictExit {
			return "", fmt.Errorf("Could not edit file: %s. It changed while the edit was applied; nothing was written. Read it again and retry.", p)
		}
		return "", fmt.Errorf("Could not edit file: %s. %w", p, err)
	}
	return fmt.Sprintf("Successfully replaced %d block(s) in %s.", len(edits), p), nil
}

// editsOf folds the legacy top-level oldText/newText pair into edits.
func editsOf(p string, a args) ([]edit, error) {
	edits, _ := a["edits"].([]edit)
	oldText, hasOld := a.str("oldText")
	newText, hasNew := a.str("newText")
	if hasOld != hasNew {
		return nil, inputErrorf("edit", "edit: oldText and newText go together")
	}
	if hasOld {
		edits = append(edits, edit{OldText: oldText, NewText: newText})
	}
	if len(edits) == 0 {
		return nil, inputErrorf("edit", "Could not edit file: %s. No edits given.", p)
	}
	return edits, nil
}

// applyEdits replaces each edit's oldText, which must occur exactly once in
// the original, with its newText; overlapping edits are refused. All edits
// are located in the original, so their order does not matter.
func applyEdits(original string, edits []edit) (string, error) {
	type span struct{ start, end, index int }
	spans := make([]span, 0, len(edits))
	for i, e := range edits {
		if e.OldText == "" {
			return "", fmt.Errorf("Edit %d: oldText must not be empty.", i+1)
		}
		at := strings.Index(original, e.OldText)
		if at < 0 {
			return "", fmt.Errorf("Edit %d: oldText was not found. It must match the file exactly, including whitespace and newlines.", i+1)
		}
		if n := strings.Count(original, e.OldText); n > 1 {
			return "", fmt.Errorf("Edit %d: oldText occurs %d times; it must occur exactly once. Add surrounding text to make it unique.", i+1, n)
		}
		spans = append(spans, span{at, at + len(e.OldText), i})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var b strings.Builder
	last := 0
	for i, s := range spans {
		if i > 0 && s.start < spans[i-1].end {
			return "", fmt.Errorf("Edits %d and %d overlap.", min(s.index, spans[i-1].index)+1, max(s.index, spans[i-1].index)+1)
		}
		b.WriteString(original[last:s.start])
		b.WriteString(edits[s.index].NewText)
		last = s.end
	}
	b.WriteString(original[last:])
	return b.String(), nil
}
