package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// readFiles are the shapes of file the read builtin test reads: empty, no
// final newline, CRLF, a NUL inside, just past or at the end of the first
// 8 KiB, lines longer than the byte cap or than one read of the file.
func readFiles() map[string]string {
	return map[string]string{
		"empty":       "",
		"newline":     "\n",
		"one":         "one",
		"two":         "one\ntwo\n",
		"nofinal":     "one\ntwo",
		"crlf":        "one\r\ntwo\r\n",
		"blank lines": "\n\n\nx\n\n",
		"nul early":   "text\x00more\n",
		"nul late":    strings.Repeat("x", 8192) + "\x00tail\n",
		"nul at 8192": strings.Repeat("x", 8191) + "\x00\n",
		"long line":   "short\n" + strings.Repeat("y", 60*1024) + "\nafter\n",
		"huge line":   strings.Repeat("z", 200*1024),
		"many":        strings.Repeat("a line of text\n", 5000),
		"many bytes":  strings.Repeat(strings.Repeat("w", 99)+"\n", 2000),
		"chunk edge":  strings.Repeat("v", 65535) + "\n" + strings.Repeat("u", 65536) + "\nend",
	}
}

// readModel is what the read builtin prints for content from line start
// (1-based), at most take lines and maxb+1 bytes, with end as its end
// mark (see runRead).
func readModel(content string, start, take, maxb int) string {
	head := content[:min(len(content), 8192)]
	if strings.IndexByte(head, 0) >= 0 {
		return fmt.Sprintf("B %d\n%s%s", len(content), content[:min(len(content), 512)], "\nEND")
	}
	lines := strings.SplitAfter(content, "\n")
	if strings.HasSuffix(content, "\n") || content == "" {
		lines = append(lines[:len(lines)-1], "")
	}
	var body strings.Builder
	first := 0
	if start <= len(lines) {
		first = len(strings.TrimSuffix(lines[start-1], "\n"))
		for _, l := range lines[start-1 : min(len(lines), start-1+take)] {
			body.WriteString(l)
		}
	}
	b := body.String()
	b = b[:min(len(b), maxb+1)]
	return fmt.Sprintf("T %d %d\n%s\nEND", strings.Count(content, "\n")+1, first, b)
}

// The agent's read builtin prints what readModel says, for every shape of
// file and a window at its start and around its end, and refuses a
// missing path, a directory and a file the user may not read, each also
// behind a symbolic link, with the message the tool shows.
func TestReadBuiltin(t *testing.T) {
	dir := sharedTempDir(t)
	files := readFiles()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte("x\n"), 0o000))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	for _, link := range []string{"two", "secret", "sub", "none"} {
		require.NoError(t, os.Symlink(link, filepath.Join(dir, "link-"+link)))
	}
	giveToNobody(t, dir)
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(filepath.Join(dir, "secret"), 0, 0))
	}
	read := func(name string, start, take int) builtinRun {
		return runBuiltin(t, agentwire.BuiltinRead, "", filepath.Join(dir, name), strconv.Itoa(start), strconv.Itoa(take), strconv.Itoa(readMaxBytes), "shown", "\nEND")
	}
	for name, content := range files {
		lines := strings.Count(content, "\n") + 1
		for _, start := range []int{1, 2, lines - 1, lines, lines + 1} {
			if start < 1 {
				continue
			}
			for _, take := range []int{1, 3, readMaxLines} {
				r := read(name, start, take)
				want := readModel(content, start, take, readMaxBytes)
				if !assert.Equal(t, builtinRun{stdout: want}, r, "%s from %d take %d", name, start, take) {
					return
				}
			}
		}
	}
	assert.Equal(t, builtinRun{stdout: readModel(files["two"], 1, readMaxLines, readMaxBytes)}, read("link-two", 1, readMaxLines))
	for name, msg := range map[string]string{
		"none": "File not found", "link-none": "File not found",
		"sub": "Path is a directory", "link-sub": "Path is a directory",
		"secret": "Permission denied", "link-secret": "Permission denied",
	} {
		assert.Equal(t, builtinRun{code: 3, stderr: msg + ": shown\n"}, read(name, 1, readMaxLines), name)
	}
}
