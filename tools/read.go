package tools

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Read limits: what one result can show.
const (
	readMaxLines = 2000
	readMaxBytes = 50 * 1024
)

var readTool = tool{
	description: "Read a text file in the workspace. Returns the raw text (no line numbers), at most 2000 lines or 50KB; use offset and limit to page through longer files.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to read (absolute, or relative to /workspace)"},
		{name: "offset", kind: kindInteger, description: "Line number to start from (1-based)", min: 1, max: 1 << 53},
		{name: "limit", kind: kindInteger, description: "Maximum number of lines to read", min: 1, max: 1 << 53},
	},
	run: runRead,
}

// readScript prints "TOTAL FIRSTLEN\n" (lines in the file as split on \n,
// and the byte length of the first selected line without its newline), then at most readMaxLines
// lines and readMaxBytes+1 bytes from line $2 on: the guest reads the whole
// file only to count, the host receives only what the result can show.
const readScript = `f=$1 start=$2 take=$3 maxb=$4
if [ ! -e "$f" ]; then printf 'File not found: %s\n' "$5" >&2; exit 3; fi
if [ -d "$f" ]; then printf 'Path is a directory: %s\n' "$5" >&2; exit 3; fi
if [ ! -r "$f" ]; then printf 'Permission denied: %s\n' "$5" >&2; exit 3; fi
nl=$(tr -cd '\n' < "$f" | wc -c) || exit 4
first=$(tail -n "+$start" "$f" | head -n 1 | tr -d '\n' | wc -c)
printf '%s %s\n' "$((nl + 1))" "$first"
if [ "$start" -le "$((nl + 1))" ]; then tail -n "+$start" "$f" | head -n "$take" | head -c "$((maxb + 1))"; fi
`

func runRead(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	paths := t.sess.Paths()
	abs, err := resolveIn("read", p, paths.Workspace, paths.Workspace)
	if err != nil {
		return "", err
	}
	offset, hasOffset := a.integer("offset")
	if !hasOffset {
		offset = 1
	}
	limit, hasLimit := a.integer("limit")
	take := int64(readMaxLines)
	if hasLimit && limit < take {
		take = limit
	}
	t.record("read")
	res, err := t.shell(ctx, session.Command{Script: readScript, Args: []string{
		abs, strconv.FormatInt(offset, 10), strconv.FormatInt(take, 10), strconv.Itoa(readMaxBytes), p,
	}}, session.ShellOptions{MaxOutput: readMaxBytes + 4096})
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	if res.ExitCode != 0 {
		return "", guestError("read", p, res)
	}
	header, body, ok := bytes.Cut(res.Stdout, []byte("\n"))
	var total, firstLen int64
	if ok {
		_, err = fmt.Sscanf(string(header), "%d %d", &total, &firstLen)
	}
	if !ok || err != nil || total < 1 {
		return "", fmt.Errorf("read %s: malformed guest output %q", p, clip(header))
	}
	if offset > total {
		return "", fmt.Errorf("Offset %d is beyond end of file (%d lines total)", offset, total)
	}
	selected := total - offset + 1
	if hasLimit && limit < selected {
		selected = limit
	}
	return formatRead(p, body, offset, selected, total, firstLen, hasLimit), nil
}

// formatRead applies the 2000-line / 50KB head truncation to the selected
// lines and adds the continuation note an agent needs to page on.
func formatRead(p string, body []byte, offset, selected, total, firstLen int64, userLimited bool) string {
	if firstLen > readMaxBytes {
		return fmt.Sprintf("[Line %d is %s, exceeds %s limit. Use bash: sed -n '%dp' %s | head -c %d]",
			offset, formatSize(firstLen), formatSize(readMaxBytes), offset, p, readMaxBytes)
	}
	lines := strings.Split(string(body), "\n")
	if int64(len(lines)) > selected {
		lines = lines[:selected]
	}
	var out []string
	size := 0
	byBytes := false
	for i, line := range lines {
		if i >= readMaxLines {
			break
		}
		n := len(line)
		if i > 0 {
			n++
		}
		if size+n > readMaxBytes {
			byBytes = true
			break
		}
		size += n
		out = append(out, line)
	}
	text := strings.Join(out, "\n")
	shown := int64(len(out))
	end := offset + shown - 1
	switch {
	case byBytes:
		return fmt.Sprintf("%s\n\n[Showing lines %d-%d of %d (%s limit). Use offset=%d to continue.]",
			text, offset, end, total, formatSize(readMaxBytes), end+1)
	case selected > readMaxLines:
		return fmt.Sprintf("%s\n\n[Showing lines %d-%d of %d. Use offset=%d to continue.]", text, offset, end, total, end+1)
	case userLimited && offset+selected-1 < total:
		return fmt.Sprintf("%s\n\n[%d more lines in file. Use offset=%d to continue.]", text, total-(offset+selected-1), offset+selected)
	}
	return text
}

// formatSize renders a byte count the way agent tool results do (50.0KB).
func formatSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
}
