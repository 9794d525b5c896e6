package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session"
)

var writeTool = tool{
	description: "Write a file in the workspace, creating parent directories and replacing any existing file atomically.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to write (absolute, or relative to /workspace)"},
		{name: "content", kind: kindString, required: true, description: "Content to write"},
	},
	run: runWrite,
}

// writeScript replaces $1 with stdin atomically: the bytes land in a temp
// file beside the target and are renamed over it, so a reader never sees
// half a file. An existing file keeps its mode. When $2 is a sha256, the
// rename happens only if the file still has that digest (the edit tool's
// lost-update guard), under a lock on the file so concurrent edits serialize.
const writeScript = `set -eu
f=$1 want=$2
dir=$(dirname -- "$f")
mkdir -p -- "$dir"
tmp=$(mktemp -- "$dir/.oma-write.XXXXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
if [ -e "$f" ]; then chmod --reference="$f" -- "$tmp" 2>/dev/null || chmod 644 -- "$tmp"; else chmod 644 -- "$tmp"; fi
if [ -n "$want" ]; then
  exec 9<"$f"
  flock 9
  have=$(sha256sum < "$f")
  if [ "${have%% *}" != "$want" ]; then
    printf 'file changed since it was read\n' >&2
    exit 9
  fi
fi
mv -f -- "$tmp" "$f"
trap - EXIT
`

// conflictExit is writeScript's exit code when the file changed under an edit.
const conflictExit = 9

func runWrite(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	content, _ := a.str("content")
	paths := t.sess.Paths()
	abs, err := resolveIn("write", p, paths.Workspace, paths.Workspace)
	if err != nil {
		return "", err
	}
	if abs == paths.Workspace {
		return "", inputErrorf("write", "write: path %s is the workspace directory, not a file", quote(p))
	}
	t.record("write")
	if err := t.writeFile(ctx, abs, content, ""); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return fmt.Sprintf("Successfully wrote %d bytes to %s", len(content), p), nil
}

// writeFile is one guest round trip; the content travels on stdin.
func (t *Toolbox) writeFile(ctx context.Context, abs, content, wantSHA string) error {
	res, err := t.shell(ctx, session.Command{Script: writeScript, Args: []string{abs, wantSHA}},
		session.ShellOptions{Stdin: strings.NewReader(content)})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return guestError("write", abs, res)
	}
	return nil
}
