package tools

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// editMaxBytes bounds the file an edit reads into host memory.
const editMaxBytes = 16 << 20

var editTool = tool{
	description: "Edit a file in the workspace by exact text replacement. Each oldText must occur exactly once in the file and edits must not overlap; otherwise nothing is changed. A file with CRLF line ends is matched as if it had LF ones and keeps CRLF; a symbolic link is edited through to its target inside the workspace.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to edit (absolute, or relative to /workspace)"},
		{name: "edits", kind: kindEdits, description: "Replacements applied to the original file"},
		{name: "oldText", kind: kindString, description: "Legacy single replacement: text to replace (use edits)"},
		{name: "newText", kind: kindString, description: "Legacy single replacement: replacement text (use edits)"},
	},
	run: runEdit,
}

func runEdit(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	edits, err := editsOf(p, a)
	if err != nil {
		return "", err
	}
	abs, err := t.changeablePath("edit", p)
	if err != nil {
		return "", err
	}
	t.record("edit")
	unlock := t.lockPath(abs)
	defer unlock()
	done := fmt.Sprintf("Successfully replaced %d block(s) in %s.", len(edits), p)
	if last, ok := t.written.get(abs); ok {
		// The file as this toolbox last left it: the guest writes only if it
		// still holds exactly these bytes; otherwise read it as usual.
		if updated, err := applyEditsToFile(last, edits); err == nil && updated != last {
			err := t.writeFile(ctx, abs, p, []byte(last), updated)
			if err == nil {
				t.written.set(abs, updated)
				return done, nil
			}
			if !IsGuestError(err) {
				t.written.drop(abs)
				return "", fmt.Errorf("Could not edit file: %s. %w", p, err)
			}
		}
		t.written.drop(abs)
	}
	// The cat builtin prints the final target of the path, which must be a
	// regular file inside the workspace, or fails with a message naming it.
	// Its open is nonblocking and checked afterwards, so a FIFO swapped in
	// after its checks cannot stall it.
	res, err := t.shell(ctx, session.Command{Builtin: agentwire.BuiltinCat, Args: []string{abs, t.sess.Paths().Workspace, p}},
		session.ShellOptions{MaxOutput: editMaxBytes})
	if err != nil {
		if errors.Is(err, session.ErrOutputOverflow) {
			return "", fmt.Errorf("Could not edit file: %s. The file is larger than %s: %w", p, bashproto.FormatSize(editMaxBytes), err)
		}
		return "", fmt.Errorf("edit %s: %w", p, err)
	}
	if res.ExitCode != 0 {
		g := guestError("edit", p, res).(*GuestError)
		g.Msg = "Could not edit file: " + p + ". " + g.Msg
		return "", g
	}
	original := string(res.Stdout)
	t.written.set(abs, original) // a corrected retry of this edit needs no read
	updated, err := applyEditsToFile(original, edits)
	if err != nil {
		return "", &EditError{Msg: fmt.Sprintf("Could not edit file: %s. %s", p, err)}
	}
	if updated == original {
		return "", &EditError{Msg: fmt.Sprintf("No changes made to %s. The replacement produced identical content.", p)}
	}
	if err := t.writeFile(ctx, abs, p, []byte(original), updated); err != nil {
		t.written.drop(abs)
		var g *GuestError
		if errors.As(err, &g) {
			if g.ExitCode == conflictExit {
				g.Msg = "It changed while the edit was applied; nothing was written. Read it again and retry."
			}
			g.Msg = "Could not edit file: " + p + ". " + g.Msg
			return "", g
		}
		return "", fmt.Errorf("Could not edit file: %s. %w", p, err)
	}
	t.written.set(abs, updated)
	return done, nil
}

// lastWritten remembers the bytes each path held when this Toolbox last
// wrote or read it, so that an edit of a file nothing else changed since
// needs no read: the guest renames only if the file still holds exactly
// these bytes, and the edit reads it as usual when it does not. It keeps at
// most editMaxBytes in all.
type lastWritten struct {
	mu    sync.Mutex
	files map[string]string
	size  int
}

func (w *lastWritten) get(abs string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	content, ok := w.files[abs]
	return content, ok
}

func (w *lastWritten) set(abs, content string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(abs)
	if len(content) > editMaxBytes {
		return
	}
	for other := range w.files {
		if w.size+len(content) <= editMaxBytes {
			break
		}
		w.dropLocked(other)
	}
	if w.files == nil {
		w.files = map[string]string{}
	}
	w.files[abs] = content
	w.size += len(content)
}

func (w *lastWritten) drop(abs string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(abs)
}

func (w *lastWritten) dropLocked(abs string) {
	if content, ok := w.files[abs]; ok {
		w.size -= len(content)
		delete(w.files, abs)
	}
}

// EditError is an edit whose edits do not fit the file's text (missing,
// repeated or overlapping oldText, or no change at all); nothing was written.
// Like a refused input, it matches ErrInvalidInput.
type EditError struct{ Msg string }

func (e *EditError) Error() string { return e.Msg }

// Is reports ErrInvalidInput as the category of every EditError.
func (e *EditError) Is(target error) bool { return target == ErrInvalidInput }

// applyEditsToFile applies edits to a file's text the way an agent sees it:
// a UTF-8 byte order mark is kept out of the matching and put back, and in a
// file whose every line ends in CRLF, matching happens on LF-normalised text
// (the edits' own CRLFs included) and the result is written back with CRLF.
func applyEditsToFile(original string, edits []edit) (string, error) {
	const bom = "\ufeff"
	text, hasBOM := strings.CutPrefix(original, bom)
	crlf := strings.Contains(text, "\r\n") && strings.Count(text, "\n") == strings.Count(text, "\r\n")
	if crlf {
		text = strings.ReplaceAll(text, "\r\n", "\n")
		normalised := make([]edit, len(edits))
		for i, e := range edits {
			normalised[i] = edit{OldText: strings.ReplaceAll(e.OldText, "\r\n", "\n"), NewText: strings.ReplaceAll(e.NewText, "\r\n", "\n")}
		}
		edits = normalised
	}
	updated, err := applyEdits(text, edits)
	if err != nil {
		return "", err
	}
	if crlf {
		updated = strings.ReplaceAll(updated, "\n", "\r\n")
	}
	if hasBOM {
		updated = bom + updated
	}
	return updated, nil
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
	for i, e := range edits {
		// Refused as input, before the file is read: an empty oldText
		// fits no file.
		if e.OldText == "" {
			return nil, inputErrorf("edit", "Could not edit file: %s. Edit %d: oldText must not be empty.", p, i+1)
		}
	}
	return edits, nil
}

// applyEdits replaces each edit's oldText (never empty: editsOf refuses
// that), which must occur exactly once in the original, with its newText;
// overlapping edits are refused. All edits are located in the original, so
// their order does not matter.
func applyEdits(original string, edits []edit) (string, error) {
	type span struct{ start, end, index int }
	spans := make([]span, 0, len(edits))
	for i, e := range edits {
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
