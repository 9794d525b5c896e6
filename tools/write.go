package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/session"
)

var writeTool = tool{
	description: "Write a file in the workspace, creating parent directories and replacing any existing file atomically (its mode is kept). A symbolic link is written through to its target when that target is inside the workspace.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to write (absolute, or relative to /workspace)"},
		{name: "content", kind: kindString, required: true, description: "Content to write"},
	},
	run: runWrite,
}

// Limits of a path the write and edit tools accept, as Linux has them.
const (
	nameMax = 255
	pathMax = 4095
)

// Exit codes of the write and cat builtins besides a plain failure.
const (
	conflictExit = 9  // the file changed under an edit
	outsideExit  = 10 // the path resolves outside the workspace
)

func runWrite(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	content, _ := a.str("content")
	abs, err := t.changeablePath("write", p)
	if err != nil {
		return "", err
	}
	t.record("write")
	unlock := t.lockPath(abs)
	defer unlock()
	if err := t.writeFile(ctx, abs, p, nil, content); err != nil {
		t.written.drop(abs)
		return "", err
	}
	t.written.set(abs, content)
	return fmt.Sprintf("Successfully wrote %d bytes to %s", len(content), p), nil
}

// changeablePath resolves a path the write and edit tools may change: inside
// the workspace, not the workspace itself, and within Linux's name limits.
func (t *Toolbox) changeablePath(tool, p string) (string, error) {
	ws := t.sess.Paths().Workspace
	abs, err := resolveIn(tool, p, ws, ws)
	if err != nil {
		return "", err
	}
	if abs == ws {
		return "", inputErrorf(tool, "%s: path %s is the workspace directory, not a file", tool, quote(p))
	}
	if len(abs) > pathMax {
		return "", inputErrorf(tool, "%s: path is too long (%d bytes; the limit is %d)", tool, len(abs), pathMax)
	}
	for name := range strings.SplitSeq(abs, "/") {
		if len(name) > nameMax {
			return "", inputErrorf(tool, "%s: file name too long (%d bytes; the limit is %d)", tool, len(name), nameMax)
		}
	}
	return abs, nil
}

// writeFile is one call of the guest agent's write builtin
// (agentwire.BuiltinWrite), given the path, the original's length (empty for
// a plain write), the workspace and the name to show; the content travels
// on stdin. The builtin replaces the path's final target (every symbolic
// link followed, as readlink -m follows them) atomically: the bytes land in
// a temp file beside the target and are renamed over it, so a reader never
// sees half a file. A target outside the workspace is refused
// (outsideExit). An existing file keeps its mode; a new one gets 644. When
// original is not nil (an edit), it goes ahead of the content on stdin and
// the rename happens only if the file still holds exactly those bytes,
// checked under a lock on the file (conflictExit otherwise): the edit
// tool's lost-update guard. A failure removes the temp file and the
// directories the call created.
func (t *Toolbox) writeFile(ctx context.Context, abs, show string, original []byte, content string) error {
	old := ""
	stdin := io.Reader(strings.NewReader(content))
	if original != nil {
		old = strconv.Itoa(len(original))
		stdin = io.MultiReader(bytes.NewReader(original), stdin)
	}
	res, err := t.shell(ctx, session.Command{Builtin: agentwire.BuiltinWrite, Args: []string{abs, old, t.sess.Paths().Workspace, show}},
		session.ShellOptions{Stdin: stdin})
	if err != nil {
		return fmt.Errorf("write %s: %w", show, err)
	}
	if res.ExitCode != 0 {
		return guestError("write", show, res)
	}
	return nil
}
