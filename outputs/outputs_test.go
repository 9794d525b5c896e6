//go:build unix

package outputs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
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

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// C1 controls (U+0080 to U+009F) are control characters too: U+0085 is a
// line break (NEL) and U+009B a terminal's CSI.
func TestSafeJoinRefusesC1Controls(t *testing.T) {
	for _, rel := range []string{"a\u0085b", "x\u009b31m.txt", "d/\u0080"} {
		_, err := SafeJoin("/host/out", rel)
		assert.ErrorIs(t, err, ErrUnsafeOutput, "%q", rel)
		assert.ErrorContains(t, err, "control character", "%q", rel)
	}
}
