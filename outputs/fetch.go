package outputs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"path/filepath"
	"strings"
)

// SafeJoin returns the host path for the output path rel inside dir. It
// refuses every path ParseListing refuses and anything the host's own rules
// consider non-local (such as reserved names on Windows). The result is
// lexically inside dir; writers into a directory others can change should
// still open it through an os.Root.
func SafeJoin(dir, rel string) (string, error) {
	if reason := checkPath(rel); reason != "" {
		return "", fmt.Errorf("%w: %q: %s", ErrUnsafeOutput, rel, reason)
	}
	local := filepath.FromSlash(rel)
	if !filepath.IsLocal(local) {
		return "", fmt.Errorf("%w: %q: not a local path on this host", ErrUnsafeOutput, rel)
	}
	return filepath.Join(dir, local), nil
}

// Verifier passes a fetched file's bytes to an underlying writer while
// checking them against the file's Record. It refuses any write that would
// take the file past its listed size, so a lying guest cannot make the host
// store more than the listing promised.
type Verifier struct {
	w   io.Writer
	rec Record
	n   int64
	sum hash.Hash
	err error
}

// NewVerifier returns a Verifier writing to w for the file described by r.
func NewVerifier(w io.Writer, r Record) *Verifier {
	return &Verifier{w: w, rec: r, sum: sha256.New()}
}

// Write forwards p unless it would exceed the listed size, in which case it
// writes nothing and returns an error matching ErrSizeMismatch. Errors are
// sticky.
func (v *Verifier) Write(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if int64(len(p)) > v.rec.Size-v.n {
		v.err = fmt.Errorf("%w: %q: more than the listed %d bytes", ErrSizeMismatch, v.rec.Path, v.rec.Size)
		return 0, v.err
	}
	n, err := v.w.Write(p)
	v.sum.Write(p[:n])
	v.n += int64(n)
	if err != nil {
		v.err = err
	}
	return n, err
}

// Finish reports whether the bytes written were exactly the listed file:
// nil, the first write error, or an error matching ErrSizeMismatch or
// ErrChecksum naming the file.
func (v *Verifier) Finish() error {
	if v.err != nil {
		return v.err
	}
	if v.n != v.rec.Size {
		return fmt.Errorf("%w: %q: listed %d bytes, received %d", ErrSizeMismatch, v.rec.Path, v.rec.Size, v.n)
	}
	if got := hex.EncodeToString(v.sum.Sum(nil)); got != strings.ToLower(v.rec.SHA256) {
		return fmt.Errorf("%w: %q: listed sha256 %s, received %s", ErrChecksum, v.rec.Path, strings.ToLower(v.rec.SHA256), got)
	}
	return nil
}
