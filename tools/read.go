package tools

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Read limits: what one result can show.
const (
	readMaxLines = 2000
	readMaxBytes = 50 * 1024
)

var readTool = tool{
	description: "Read a text file in the workspace or in /mnt/session/uploads. Returns the raw text (no line numbers), at most 2000 lines or 50KB; use offset and limit to page through longer files. A binary file is described (size and type), not printed.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to read (absolute, or relative to /workspace)"},
		{name: "offset", kind: kindInteger, description: "Line number to start from (1-based; 0 also means the first line)", min: 0, max: 1 << 53},
		{name: "limit", kind: kindInteger, description: "Maximum number of lines to read", min: 1, max: 1 << 53},
	},
	run: runRead,
}

// runRead is one call of the guest agent's read builtin
// (agentwire.BuiltinRead), given the file, the first line, the most lines
// and bytes to send, the name to show in its messages and an end mark. It
// prints "T TOTAL FIRSTLEN\n" (lines in the file as split on
// \n, and the byte length of the first selected line without its newline),
// then at most readMaxLines lines and readMaxBytes+1 bytes from the first
// line on: the guest reads the whole file only to count, the host receives
// only what the result can show. A file with a NUL byte in its first 8 KiB
// is binary: it gets "B SIZE\n" and its first 512 bytes, for the host to
// name its type. Either way the output ends with the call's own end mark,
// so output cut short is never mistaken for a short file.
func runRead(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	paths := t.sess.Paths()
	abs, err := resolveIn("read", p, paths.Workspace, paths.Workspace, paths.Uploads)
	if err != nil {
		return "", err
	}
	offset, _ := a.integer("offset")
	offset = max(offset, 1)
	limit, hasLimit := a.integer("limit")
	take := int64(readMaxLines)
	if hasLimit && limit < take {
		take = limit
	}
	t.record("read")
	end := "\n" + glob.NewToken("read-end")
	res, err := t.shell(ctx, session.Command{Builtin: agentwire.BuiltinRead, Args: []string{
		abs, strconv.FormatInt(offset, 10), strconv.FormatInt(take, 10), strconv.Itoa(readMaxBytes), p, end,
	}}, session.ShellOptions{MaxOutput: readMaxBytes + 4096})
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	if res.ExitCode != 0 {
		return "", guestError("read", p, res)
	}
	out, ok := bytes.CutSuffix(res.Stdout, []byte(end))
	if !ok {
		return "", fmt.Errorf("read %s: the guest's output was cut short (%d bytes, no end mark): %w", p, len(res.Stdout), glob.ErrMalformed)
	}
	header, body, ok := bytes.Cut(out, []byte("\n"))
	var kind string
	var total, firstLen int64
	if ok {
		_, err = fmt.Sscanf(string(header), "%s %d", &kind, &total)
		if err == nil && kind == "T" {
			_, err = fmt.Sscanf(string(header), "T %d %d", &total, &firstLen)
		}
	}
	switch {
	case !ok || err != nil || (kind != "T" && kind != "B") || total < 0 || (kind == "T" && total < 1):
		return "", fmt.Errorf("read %s: malformed guest output %q: %w", p, clip(header), glob.ErrMalformed)
	case kind == "B":
		return fmt.Sprintf("[Binary file: %s, %s (%d bytes), %s. read shows text only; inspect it with bash, e.g. od -c %s | head]",
			p, bashproto.FormatSize(total), total, binaryType(body), shellQuote(p)), nil
	case offset > total:
		return "", fmt.Errorf("Offset %d is beyond end of file (%d lines total)", offset, total)
	}
	selected := total - offset + 1
	if hasLimit && limit < selected {
		selected = limit
	}
	return formatRead(p, body, offset, selected, total, firstLen, hasLimit), nil
}

// binaryType names a binary file's type from its first bytes.
func binaryType(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF executable or library"
	case bytes.HasPrefix(head, []byte("\xca\xfe\xba\xbe")), bytes.HasPrefix(head, []byte("\xcf\xfa\xed\xfe")):
		return "Mach-O executable"
	case bytes.HasPrefix(head, []byte("SQLite format 3\x00")):
		return "SQLite database"
	}
	return http.DetectContentType(head)
}

// shellQuote makes a path safe to paste into a shell command: plain paths
// stay as they are, any other is single-quoted; a leading '-' gets "./" so
// that no command takes it for an option.
func shellQuote(p string) string {
	if strings.HasPrefix(p, "-") {
		p = "./" + p
	}
	plain := p != "" && strings.IndexFunc(p, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./-+:@%,=", r))
	}) < 0
	if plain {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}

// formatRead applies the 2000-line / 50KB head truncation to the selected
// lines and adds the continuation note an agent needs to page on.
func formatRead(p string, body []byte, offset, selected, total, firstLen int64, userLimited bool) string {
	if firstLen > readMaxBytes {
		return fmt.Sprintf("[Line %d is %s, exceeds %s limit. Use bash: sed -n '%dp' %s | head -c %d]",
			offset, bashproto.FormatSize(firstLen), bashproto.FormatSize(readMaxBytes), offset, shellQuote(p), readMaxBytes)
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
			text, offset, end, total, bashproto.FormatSize(readMaxBytes), end+1)
	case selected > readMaxLines:
		return fmt.Sprintf("%s\n\n[Showing lines %d-%d of %d. Use offset=%d to continue.]", text, offset, end, total, end+1)
	case userLimited && offset+selected-1 < total:
		return fmt.Sprintf("%s\n\n[%d more lines in file. Use offset=%d to continue.]", text, total-(offset+selected-1), offset+selected)
	}
	return text
}
