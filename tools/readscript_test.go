package tools

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runReadScript runs readScript with bash and PATH, as the guest would.
func runReadScript(t *testing.T, path, file string, start, take int) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", readScript, "bash", file, strconv.Itoa(start), strconv.Itoa(take), strconv.Itoa(readMaxBytes), "shown", "\nEND")
	cmd.Env = []string{"PATH=" + path}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String() + errb.String(), code
}

// readScript's perl pass and its coreutils fallback print the same bytes
// for every shape of file: empty, no final newline, CRLF, a NUL inside or
// past the first 8 KiB, lines longer than the byte cap or than perl's
// reads, and offsets and limits around the file's end.
func TestReadScriptPerlMatchesCoreutils(t *testing.T) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("needs perl for the fast path")
	}
	withPerl, withoutPerl := t.TempDir(), t.TempDir()
	for _, tool := range []string{"head", "tail", "tr", "wc", "stat"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err)
		for _, dir := range []string{withPerl, withoutPerl} {
			require.NoError(t, os.Symlink(p, filepath.Join(dir, tool)))
		}
	}
	require.NoError(t, os.Symlink(perl, filepath.Join(withPerl, "perl")))

	files := readScriptFiles()
	dir := t.TempDir()
	for name, content := range files {
		file := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(file, []byte(content), 0o644))
		for _, start := range readScriptStarts(content) {
			for _, take := range []int{1, 3, readMaxLines} {
				fast, fastCode := runReadScript(t, withPerl, file, start, take)
				slow, slowCode := runReadScript(t, withoutPerl, file, start, take)
				assert.Equal(t, slowCode, fastCode, "%s from %d take %d", name, start, take)
				if !assert.Equal(t, slow, fast, "%s from %d take %d", name, start, take) {
					return
				}
			}
		}
	}
	for _, missing := range []string{filepath.Join(dir, "none"), dir} {
		fast, fastCode := runReadScript(t, withPerl, missing, 1, 1)
		slow, slowCode := runReadScript(t, withoutPerl, missing, 1, 1)
		assert.Equal(t, slowCode, fastCode)
		assert.Equal(t, slow, fast)
	}
}

// readScriptFiles are the shapes of file the read script tests read:
// empty, no final newline, CRLF, a NUL inside or past the first 8 KiB,
// lines longer than the byte cap or than perl's reads.
func readScriptFiles() map[string]string {
	many := strings.Repeat("a line of text\n", 5000)
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
		"many":        many,
		"many bytes":  strings.Repeat(strings.Repeat("w", 99)+"\n", 2000),
		"chunk edge":  strings.Repeat("v", 65535) + "\n" + strings.Repeat("u", 65536) + "\nend",
	}
}

// readScriptStarts are the first lines tried in a file: its start and
// around its end.
func readScriptStarts(content string) []int {
	lines := strings.Count(content, "\n") + 1
	var starts []int
	for _, start := range []int{1, 2, lines - 1, lines, lines + 1} {
		if start >= 1 {
			starts = append(starts, start)
		}
	}
	return starts
}
