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

// readScript prints "T TOTAL FIRSTLEN\n" (lines in the file as split on \n,
// and the byte length of the first selected line without its newline), then
// at most readMaxLines lines and readMaxBytes+1 bytes from line $2 on: the
// guest reads the whole file only to count, the host receives only what the
// result can show. A file with a NUL byte in its first 8 KiB is binary: it
// gets "B SIZE\n" and its first 512 bytes, for the host to name its type.
// Either way the output ends with the call's own end mark ($6), so output cut
// short is never mistaken for a short file. Where perl exists (the image's
// perl-base), one perl process does it all in one pass over one open of the
// file; else coreutils pipelines do, with the same output.
const readScript = `f=$1 start=$2 take=$3 maxb=$4 show=$5 end=$6
if [ ! -e "$f" ]; then printf 'File not found: %s\n' "$show" >&2; exit 3; fi
if [ -d "$f" ]; then printf 'Path is a directory: %s\n' "$show" >&2; exit 3; fi
if [ ! -r "$f" ]; then printf 'Permission denied: %s\n' "$show" >&2; exit 3; fi
if command -v perl >/dev/null 2>&1; then
	exec perl -e '
	my ($f, $start, $take, $maxb, $end) = @ARGV;
	open(my $fh, "<", $f) or exit 4;
	binmode $fh;
	binmode STDOUT;
	my $cap = $maxb + 1;
	my ($head, $nl, $ln, $first, $firstdone, $body, $lines, $bodydone) = ("", 0, 1, 0, 0, "", 0, 0);
	while (1) {
		my $n = sysread($fh, my $buf, 65536);
		defined $n or exit 4;
		last if $n == 0;
		if (length $head < 8192) {
			$head .= substr($buf, 0, 8192 - length $head);
			if (index($head, "\0") >= 0) {
				my @st = stat $fh or exit 4;
				print "B $st[7]\n", substr($head, 0, 512), $end;
				exit 0;
			}
		}
		$nl += ($buf =~ tr/\n//);
		my $pos = 0;
		while ($ln < $start) {
			my $i = index($buf, "\n", $pos);
			last if $i < 0;
			$pos = $i + 1;
			$ln++;
		}
		next if $ln < $start;
		if (!$firstdone) {
			my $i = index($buf, "\n", $pos);
			if ($i < 0) { $first += $n - $pos } else { $first += $i - $pos; $firstdone = 1 }
		}
		while (!$bodydone && length $body < $cap) {
			my $i = index($buf, "\n", $pos);
			if ($i < 0) { $body .= substr($buf, $pos); last }
			$body .= substr($buf, $pos, $i + 1 - $pos);
			$pos = $i + 1;
			$bodydone = ++$lines >= $take;
		}
		if (length $body >= $cap) { $body = substr($body, 0, $cap); $bodydone = 1 }
	}
	print "T ", $nl + 1, " $first\n", $body, $end;
' -- "$f" "$start" "$take" "$maxb" "$end"
fi
nul=$(head -c 8192 -- "$f" | tr -cd '\000' | wc -c) || exit 4
if [ "$nul" -gt 0 ]; then
	size=$(stat -Lc %s -- "$f") || exit 4
	printf 'B %s\n' "$size"
	head -c 512 -- "$f" || exit 4
	printf '%s' "$end"
	exit 0
fi
nl=$(tr -cd '\n' < "$f" | wc -c) || exit 4
first=$(tail -n "+$start" "$f" | head -n 1 | tr -d '\n' | wc -c)
printf 'T %s %s\n' "$((nl + 1))" "$first"
if [ "$start" -le "$((nl + 1))" ]; then tail -n "+$start" "$f" | head -n "$take" | head -c "$((maxb + 1))"; fi
printf '%s' "$end"
`

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
	res, err := t.shell(ctx, session.Command{Script: readScript, Builtin: agentwire.BuiltinRead, Args: []string{
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
