//go:build unix

package outputs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func listing(fields ...string) []byte {
	var b bytes.Buffer
	for _, f := range fields {
		b.WriteString(f)
		b.WriteByte(0)
	}
	return b.Bytes()
}

func TestMIMEType(t *testing.T) {
	for name, want := range map[string]string{
		"a.txt":            "text/plain",
		"dir/B.JSON":       "application/json",
		"x.csv":            "text/csv",
		"index.html":       "text/html",
		"index.HTM":        "text/html",
		"README.md":        "text/markdown",
		"deck.pptx":        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
		"p.PNG":            "image/png",
		"p.jpg":            "image/jpeg",
		"p.Jpeg":           "image/jpeg",
		"doc.pdf":          "application/pdf",
		"archive.tar.gz":   "application/octet-stream",
		"noext":            "application/octet-stream",
		"txt":              "application/octet-stream",
		"a.md.bak":         "application/octet-stream",
		"dir.pdf/file.bin": "application/octet-stream",
	} {
		assert.Equal(t, want, MIMEType(name), name)
	}
}

func TestParseListingAccepts(t *testing.T) {
	upper := strings.ToUpper(sum("x"))
	recs, err := ParseListing(listing(
		"a.txt", "3", sum("abc"),
		"dir/sub/b c.bin", "0", upper,
		"ünïcode/…", "1", sum("x"),
		"dir/sub2", "25", sum("y"),
	), DefaultLimits)
	require.NoError(t, err)
	assert.Equal(t, []Record{
		{Path: "a.txt", Size: 3, SHA256: sum("abc")},
		{Path: "dir/sub/b c.bin", Size: 0, SHA256: sum("x")},
		{Path: "ünïcode/…", Size: 1, SHA256: sum("x")},
		{Path: "dir/sub2", Size: 25, SHA256: sum("y")},
	}, recs)

	recs, err = ParseListing(nil, DefaultLimits)
	require.NoError(t, err)
	assert.Empty(t, recs)
}

func TestParseListingRefuses(t *testing.T) {
	h := sum("")
	long := strings.Repeat("a", 256)
	cases := []struct {
		name   string
		data   []byte
		limits Limits
		want   error
		record int
		text   string
	}{
		{"no final NUL", []byte("a\x000\x00" + h), Limits{}, ErrUnsafeOutput, -1, "does not end with NUL"},
		{"two fields", listing("a", "0"), Limits{}, ErrUnsafeOutput, -1, "not a multiple of 3"},
		{"four fields", listing("a", "0", h, "b"), Limits{}, ErrUnsafeOutput, -1, "not a multiple of 3"},
		{"lone NUL", []byte{0}, Limits{}, ErrUnsafeOutput, -1, "not a multiple of 3"},
		{"empty path", listing("", "0", h), Limits{}, ErrUnsafeOutput, 0, "empty path"},
		{"absolute", listing("/etc/passwd", "0", h), Limits{}, ErrUnsafeOutput, 0, "absolute path"},
		{"dotdot", listing("ok", "0", h, "a/../../b", "0", h), Limits{}, ErrUnsafeOutput, 1, "'..' path segment"},
		{"leading dotdot", listing("../b", "0", h), Limits{}, ErrUnsafeOutput, 0, "'..'"},
		{"bare dotdot", listing("..", "0", h), Limits{}, ErrUnsafeOutput, 0, "'..'"},
		{"dot segment", listing("./a", "0", h), Limits{}, ErrUnsafeOutput, 0, "'.' path segment"},
		{"inner dot", listing("a/./b", "0", h), Limits{}, ErrUnsafeOutput, 0, "'.' path segment"},
		{"double slash", listing("a//b", "0", h), Limits{}, ErrUnsafeOutput, 0, "empty path segment"},
		{"trailing slash", listing("a/", "0", h), Limits{}, ErrUnsafeOutput, 0, "empty path segment"},
		{"backslash", listing(`a\..\b`, "0", h), Limits{}, ErrUnsafeOutput, 0, "backslash"},
		{"newline", listing("a\nb", "0", h), Limits{}, ErrUnsafeOutput, 0, "control character"},
		{"DEL", listing("a\x7f", "0", h), Limits{}, ErrUnsafeOutput, 0, "control character"},
		{"invalid UTF-8", listing("a\xff", "0", h), Limits{}, ErrUnsafeOutput, 0, "UTF-8"},
		{"long segment", listing("d/"+long, "0", h), Limits{}, ErrUnsafeOutput, 0, "255 bytes"},
		{"long path", listing(strings.Repeat("abcdefgh/", 456)+"x", "0", h), Limits{}, ErrUnsafeOutput, 0, "4096"},
		{"duplicate", listing("a", "0", h, "a", "0", h), Limits{}, ErrUnsafeOutput, 1, "duplicate"},
		{"file and dir", listing("a/b", "0", h, "a", "0", h), Limits{}, ErrUnsafeOutput, 0, `parent "a"`},
		{"negative size", listing("a", "-1", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"plus size", listing("a", "+1", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"empty size", listing("a", "", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"float size", listing("a", "1.5", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"hex size", listing("a", "0x10", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"leading zero", listing("a", "01", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"space size", listing("a", " 1", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"overflow size", listing("a", "9999999999999999999", h), Limits{}, ErrUnsafeOutput, 0, "invalid size"},
		{"short sha", listing("a", "0", h[:63]), Limits{}, ErrUnsafeOutput, 0, "invalid sha256"},
		{"long sha", listing("a", "0", h+"0"), Limits{}, ErrUnsafeOutput, 0, "invalid sha256"},
		{"non-hex sha", listing("a", "0", "g"+h[1:]), Limits{}, ErrUnsafeOutput, 0, "invalid sha256"},
		{"sha with name", listing("a", "0", h+"  a"), Limits{}, ErrUnsafeOutput, 0, "invalid sha256"},
		{"file too big", listing("a", "26214401", h), Limits{}, ErrQuota, 0, "more than 26214400"},
		{"total too big", listing("a", "6", h, "b", "5", h), Limits{MaxBytes: 10}, ErrQuota, 1, "more than 10 bytes in all"},
		{"too many files", listing("a", "0", h, "b", "0", h), Limits{MaxFiles: 1}, ErrQuota, -1, "more than 1 files"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs, err := ParseListing(c.data, c.limits)
			require.Error(t, err)
			assert.Nil(t, recs)
			assert.ErrorIs(t, err, c.want)
			var le *ListingError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, c.record, le.Record)
			assert.Contains(t, err.Error(), c.text)
			if c.record >= 0 {
				assert.Contains(t, err.Error(), "record "+strconv.Itoa(c.record)+" "+strconv.Quote(le.Path))
			}
		})
	}
}

func TestLimits(t *testing.T) {
	assert.Equal(t, DefaultLimits, Limits{}.normalized())
	assert.Equal(t, Limits{MaxFiles: 3, MaxFileBytes: DefaultMaxFileBytes, MaxBytes: 7}, Limits{MaxFiles: 3, MaxFileBytes: -1, MaxBytes: 7}.normalized())
	assert.Equal(t, int64(100*(4096+19+64+3)), DefaultLimits.MaxListingBytes())
}

func TestQuotaError(t *testing.T) {
	e := NewQuotaError([]byte("  session outputs exceed limits: more than 100 files\n"))
	assert.ErrorIs(t, e, ErrQuota)
	assert.Equal(t, "session outputs exceed limits: more than 100 files", e.Message)
	assert.Equal(t, "session outputs exceed limits", (&QuotaError{}).Error())
	big := NewQuotaError(append(bytes.Repeat([]byte("x"), 5000), 0xff))
	assert.Len(t, big.Message, 1024)
	assert.ErrorIs(t, &ListingError{Err: ErrQuota}, ErrQuota)
}

func TestSafeJoin(t *testing.T) {
	dir := filepath.FromSlash("/host/out")
	for rel, want := range map[string]string{
		"a.txt":     "/host/out/a.txt",
		"d/e/f.bin": "/host/out/d/e/f.bin",
		"sp ace":    "/host/out/sp ace",
	} {
		got, err := SafeJoin(dir, rel)
		require.NoError(t, err, rel)
		assert.Equal(t, filepath.FromSlash(want), got)
	}
	for _, rel := range []string{"", "/abs", "..", "../x", "a/../../x", "a/..", "./a", `a\b`, "a//b", "a/", "x\x00y", "nl\n"} {
		_, err := SafeJoin(dir, rel)
		assert.ErrorIs(t, err, ErrUnsafeOutput, "%q", rel)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestVerifier(t *testing.T) {
	rec := Record{Path: "out/r.txt", Size: 11, SHA256: sum("hello world")}

	var buf bytes.Buffer
	v := NewVerifier(&buf, rec)
	for _, p := range []string{"hello", " ", "world"} {
		n, err := v.Write([]byte(p))
		require.NoError(t, err)
		assert.Equal(t, len(p), n)
	}
	require.NoError(t, v.Finish())
	assert.Equal(t, "hello world", buf.String())

	upper := rec
	upper.SHA256 = strings.ToUpper(rec.SHA256)
	v = NewVerifier(io.Discard, upper)
	_, _ = v.Write([]byte("hello world"))
	assert.NoError(t, v.Finish())

	buf.Reset()
	v = NewVerifier(&buf, rec)
	_, err := v.Write([]byte("hello"))
	require.NoError(t, err)
	n, err := v.Write([]byte(" world and more"))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, ErrSizeMismatch)
	assert.Contains(t, err.Error(), "out/r.txt")
	assert.Equal(t, "hello", buf.String(), "nothing beyond the listed size is forwarded")
	_, err = v.Write([]byte("x"))
	assert.ErrorIs(t, err, ErrSizeMismatch, "errors are sticky")
	assert.ErrorIs(t, v.Finish(), ErrSizeMismatch)

	v = NewVerifier(&buf, rec)
	_, _ = v.Write([]byte("hello"))
	err = v.Finish()
	assert.ErrorIs(t, err, ErrSizeMismatch)
	assert.Contains(t, err.Error(), "received 5")

	v = NewVerifier(&buf, rec)
	_, _ = v.Write([]byte("hello WORLD"))
	err = v.Finish()
	assert.ErrorIs(t, err, ErrChecksum)
	assert.Contains(t, err.Error(), "out/r.txt")

	v = NewVerifier(failWriter{}, rec)
	_, err = v.Write([]byte("hello"))
	assert.EqualError(t, err, "disk full")
	assert.EqualError(t, v.Finish(), "disk full")
}

// runBash runs a guest script locally the way the backends do.
func runBash(t *testing.T, script string, args []string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command("/bin/bash", append([]string{"-c", script, "bash"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.Bytes(), errb.Bytes(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.Bytes(), errb.Bytes(), 0
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func TestListingScript(t *testing.T) {
	root := filepath.Join(t.TempDir(), "outputs")
	files := map[string]string{
		"top.txt":                       "top",
		"a/b/c/deep.json":               `{"x":1}`,
		"a/b/empty":                     "",
		"with space.md":                 "spaced",
		"name\nwith newline":            "nl",
		`back\slash`:                    "bs",
		"tab\there":                     "tab",
		".hidden/-dash.csv":             "h",
		"ünï/çødé.txt":                  "unicode",
		"z/" + strings.Repeat("n", 255): "long name",
	}
	for rel, content := range files {
		writeFile(t, filepath.Join(root, rel), content)
	}
	outside := filepath.Join(t.TempDir(), "secret")
	writeFile(t, outside, "secret")
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link-to-file")))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(root, "link-to-dir")))
	require.NoError(t, os.Symlink("missing", filepath.Join(root, "dangling")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))

	script, args := ListingScript(root, DefaultLimits)
	assert.Equal(t, []string{root, "100", "26214400", "104857600"}, args)
	stdout, stderr, code := runBash(t, script, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Empty(t, stderr)

	var want []string
	for _, rel := range slices.Sorted(maps.Keys(files)) { // byte order, as sort -z under LC_ALL=C
		want = append(want, rel, strconv.Itoa(len(files[rel])), sum(files[rel]))
	}
	assert.Equal(t, string(listing(want...)), string(stdout), "regular files only, byte order, exact records")

	// The host refuses the names it cannot use safely, naming them.
	_, err := ParseListing(stdout, DefaultLimits)
	assert.ErrorIs(t, err, ErrUnsafeOutput)
	assert.Contains(t, err.Error(), `"back\\slash"`)

	// Without those names the listing parses and matches the tree.
	require.NoError(t, os.Remove(filepath.Join(root, `back\slash`)))
	require.NoError(t, os.Remove(filepath.Join(root, "name\nwith newline")))
	require.NoError(t, os.Remove(filepath.Join(root, "tab\there")))
	stdout, _, code = runBash(t, script, args)
	require.Equal(t, 0, code)
	recs, err := ParseListing(stdout, DefaultLimits)
	require.NoError(t, err)
	require.Len(t, recs, len(files)-3)
	for _, r := range recs {
		content, ok := files[r.Path]
		require.True(t, ok, r.Path)
		assert.Equal(t, int64(len(content)), r.Size)
		assert.Equal(t, sum(content), r.SHA256)
	}
}

func TestListingScriptEmptyAndMissing(t *testing.T) {
	dir := t.TempDir()
	for _, root := range []string{filepath.Join(dir, "missing"), dir} {
		stdout, stderr, code := runBash(t, listingScript, []string{root, "1", "1", "1"})
		assert.Equal(t, 0, code, "stderr: %s", stderr)
		assert.Empty(t, stdout)
	}
	writeFile(t, filepath.Join(dir, "target", "f"), "x")
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), link))
	stdout, stderr, code := runBash(t, listingScript, []string{link, "1", "1", "1"})
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, string(stderr), "symlink")
}

func TestListingScriptLimits(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a"), "12345")
	writeFile(t, filepath.Join(root, "b/c"), "123")
	writeFile(t, filepath.Join(root, "d e"), "1")
	cases := []struct {
		limits Limits
		msg    string
	}{
		{Limits{MaxFiles: 2}, "session outputs exceed limits: more than 2 files\n"},
		{Limits{MaxFileBytes: 4}, "session outputs exceed limits: a has 5 bytes, more than 4\n"},
		{Limits{MaxFileBytes: 2}, "session outputs exceed limits: a has 5 bytes, more than 2\n"},
		{Limits{MaxBytes: 8}, "session outputs exceed limits: more than 8 bytes in all\n"},
	}
	for _, c := range cases {
		script, args := ListingScript(root, c.limits)
		stdout, stderr, code := runBash(t, script, args)
		assert.Equal(t, QuotaExitCode, code, c.msg)
		assert.Empty(t, stdout)
		assert.Equal(t, c.msg, string(stderr))
		assert.ErrorIs(t, NewQuotaError(stderr), ErrQuota)
	}
	writeFile(t, filepath.Join(root, "sp ace/big"), "123456")
	script, args := ListingScript(root, Limits{MaxFileBytes: 5})
	_, stderr, code := runBash(t, script, args)
	assert.Equal(t, QuotaExitCode, code)
	assert.Equal(t, "session outputs exceed limits: sp\\ ace/big has 6 bytes, more than 5\n", string(stderr))

	// Exactly at every limit is fine.
	script, args = ListingScript(root, Limits{MaxFiles: 4, MaxFileBytes: 6, MaxBytes: 15})
	stdout, stderr, code := runBash(t, script, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	recs, err := ParseListing(stdout, Limits{MaxFiles: 4, MaxFileBytes: 6, MaxBytes: 15})
	require.NoError(t, err)
	assert.Len(t, recs, 4)
}

func TestListingScriptManyFiles(t *testing.T) {
	root := t.TempDir()
	want := map[string]string{}
	for i := range 100 {
		rel := filepath.Join("d"+strconv.Itoa(i%7), "f "+strconv.Itoa(i))
		want[filepath.ToSlash(rel)] = strings.Repeat("x", i)
		writeFile(t, filepath.Join(root, rel), strings.Repeat("x", i))
	}
	script, args := ListingScript(root, DefaultLimits)
	stdout, stderr, code := runBash(t, script, args)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	recs, err := ParseListing(stdout, DefaultLimits)
	require.NoError(t, err)
	require.Len(t, recs, 100)
	for _, r := range recs {
		assert.Equal(t, sum(want[r.Path]), r.SHA256, r.Path)
		assert.Equal(t, int64(len(want[r.Path])), r.Size, r.Path)
	}
}

func TestFetchScript(t *testing.T) {
	root := filepath.Join(t.TempDir(), "outputs")
	content := "line 1\n\x00binary\xff\n"
	writeFile(t, filepath.Join(root, "d/sp ace.bin"), content)
	writeFile(t, filepath.Join(root, "-dash"), "dash")
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "secret")
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "filelink")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "dirlink")))
	require.NoError(t, os.Symlink("d", filepath.Join(root, "innerlink")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))

	for rel, want := range map[string]string{"d/sp ace.bin": content, "-dash": "dash"} {
		script, args := FetchScript(root, rel)
		stdout, stderr, code := runBash(t, script, args)
		require.Equal(t, 0, code, "stderr: %s", stderr)
		assert.Equal(t, want, string(stdout))
		v := NewVerifier(io.Discard, Record{Path: rel, Size: int64(len(want)), SHA256: sum(want)})
		_, err := v.Write(stdout)
		require.NoError(t, err)
		assert.NoError(t, v.Finish())
	}
	for rel, reason := range map[string]string{
		"filelink":             "symlink",
		"dirlink/secret":       "symlink",
		"innerlink/sp ace.bin": "symlink",
		"fifo":                 "not a regular file",
		"d":                    "not a regular file",
		"missing":              "not a regular file",
	} {
		script, args := FetchScript(root, rel)
		stdout, stderr, code := runBash(t, script, args)
		assert.Equal(t, 1, code, rel)
		assert.Empty(t, stdout, rel)
		assert.Contains(t, string(stderr), reason, rel)
	}
}

func FuzzParseListing(f *testing.F) {
	h := sum("")
	f.Add(listing("a.txt", "3", sum("abc")))
	f.Add(listing("a/b/c", "0", h, "d", "12", strings.ToUpper(h)))
	f.Add(listing("../x", "1", h))
	f.Add(listing("/abs", "1", h))
	f.Add(listing("a/./b", "01", h))
	f.Add(listing("a", "0", h, "a/b", "0", h))
	f.Add(listing(`a\b`, "0", h))
	f.Add([]byte("a\x000\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		limits := Limits{MaxFiles: 5, MaxFileBytes: 1000, MaxBytes: 2000}
		recs, err := ParseListing(data, limits)
		if err != nil {
			var le *ListingError
			if !errors.As(err, &le) || !(errors.Is(err, ErrUnsafeOutput) || errors.Is(err, ErrQuota)) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(recs) > limits.MaxFiles {
			t.Fatalf("%d records", len(recs))
		}
		seen := map[string]bool{}
		var total int64
		base := filepath.FromSlash("/base/dir")
		for _, r := range recs {
			if r.Path == "" || strings.HasPrefix(r.Path, "/") || slices.Contains(strings.Split(r.Path, "/"), "..") {
				t.Fatalf("unsafe path %q accepted", r.Path)
			}
			if !filepath.IsLocal(r.Path) || seen[r.Path] {
				t.Fatalf("path %q accepted", r.Path)
			}
			seen[r.Path] = true
			joined, err := SafeJoin(base, r.Path)
			if err != nil {
				t.Fatalf("SafeJoin(%q): %v", r.Path, err)
			}
			if !strings.HasPrefix(joined, base+string(filepath.Separator)) {
				t.Fatalf("SafeJoin(%q) = %q", r.Path, joined)
			}
			if r.Size < 0 || r.Size > limits.MaxFileBytes {
				t.Fatalf("size %d accepted", r.Size)
			}
			total += r.Size
			if _, err := hex.DecodeString(r.SHA256); err != nil || len(r.SHA256) != 64 || strings.ToLower(r.SHA256) != r.SHA256 {
				t.Fatalf("checksum %q accepted", r.SHA256)
			}
		}
		if total > limits.MaxBytes {
			t.Fatalf("total %d accepted", total)
		}
	})
}
