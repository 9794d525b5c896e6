package grep_test

import (
	"errors"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/grep"
)

// searchOutcome is what the host makes of a grep search's stdout.
type searchOutcome struct {
	matches []string
	limit   bool
	err     error
}

// parseSearch feeds stdout, split into chunks by rng (one chunk when rng
// is nil), through the readiness filter and the collector as the grep tool
// does, stopping where the tool stops: the first error or the match cap.
func parseSearch(t *testing.T, stdout []byte, opts grep.CollectorOptions, rng *rand.Rand) searchOutcome {
	t.Helper()
	ready := grep.NewReadinessFilter()
	c, err := grep.NewCollector(opts)
	if err != nil {
		t.Fatal(err)
	}
	for len(stdout) > 0 {
		n := len(stdout)
		if rng != nil {
			n = 1 + rng.IntN(len(stdout))
		}
		chunk := slices.Clone(stdout[:n])
		stdout = stdout[n:]
		rest, err := ready.Push(chunk)
		if err == nil && len(rest) > 0 {
			err = c.Push(rest)
		}
		if err != nil {
			return searchOutcome{err: err}
		}
		if c.LimitReached() {
			return searchOutcome{matches: c.Matches(), limit: true}
		}
	}
	if err := ready.Finish(); err != nil {
		return searchOutcome{err: err}
	}
	if err := c.Finish(); err != nil {
		return searchOutcome{err: err}
	}
	return searchOutcome{matches: c.Matches()}
}

// FuzzSearchStream hands arbitrary guest output to grep's stream parser.
// Whatever the guest prints: no panic; an error is a *glob.StreamError of
// one of its kinds; every result is the searched root or a clean path
// below it (relative to Base when one is given), at most HeadLimit of them
// within MaxOutputBytes; and the outcome is the same however the stream is
// split into chunks.
func FuzzSearchStream(f *testing.F) {
	const marker = grep.ReadyMarker + "\x00"
	for _, s := range []string{
		marker + "/workspace/a.txt\x001\n/workspace/sub/b.go\x0012\n",
		marker + "/workspace\x001\n",
		marker + "/workspace/../etc/passwd\x001\n",
		marker + "/workspace/a\x001\n/workspacefoo\x001\n",
		marker + "/workspace//a\x001\n/workspace/./a\x001\n/workspace/a/\x001\n",
		marker + "/workspace/cut-short",
		marker + "/workspace/cut-short\x003",
		marker + "/workspace/a\x00/workspace/b\x001\n",
		marker + "/workspace/a\x00x\n",
		marker + "/other\x001\n",
		"__OMA_GLOB_READY__\x00/workspace/a\x001\n",
		"no marker at all",
		strings.Repeat("x", 300) + "\x00",
		marker + strings.Repeat("/workspace/f\x001\n", 150),
		marker + "/workspace/\xff\xfe\x001\n/workspace/new\nline\x001\n",
	} {
		f.Add([]byte(s), uint64(1), uint8(0), false)
	}
	f.Add([]byte(marker+"/workspace/a\x001\n/workspace/b\x002\n/workspace/c\x003\n"), uint64(2), uint8(2), true)
	f.Fuzz(func(t *testing.T, stdout []byte, seed uint64, headLimit uint8, withBase bool) {
		const root = "/workspace"
		opts := grep.CollectorOptions{Root: root, HeadLimit: int(headLimit)}
		if withBase {
			opts.Base = "/workspace/sub"
		}
		whole := parseSearch(t, stdout, opts, nil)
		split := parseSearch(t, stdout, opts, rand.New(rand.NewPCG(seed, 0)))
		if !slices.Equal(whole.matches, split.matches) || whole.limit != split.limit || (whole.err == nil) != (split.err == nil) ||
			whole.err != nil && whole.err.Error() != split.err.Error() {
			t.Fatalf("chunking changed the outcome: whole %+v, split %+v", whole, split)
		}
		if whole.err != nil {
			var se *glob.StreamError
			if !errors.As(whole.err, &se) || !(errors.Is(se, glob.ErrNotReady) || errors.Is(se, glob.ErrLimit) || errors.Is(se, glob.ErrMalformed)) {
				t.Fatalf("untyped error %v", whole.err)
			}
			return
		}
		limit := int(headLimit)
		if limit == 0 {
			limit = grep.DefaultHeadLimit
		}
		if len(whole.matches) > limit {
			t.Fatalf("%d matches, head limit %d", len(whole.matches), limit)
		}
		if n := len(strings.Join(whole.matches, "\n")); n > grep.MaxOutputBytes {
			t.Fatalf("%d bytes of output", n)
		}
		for _, m := range whole.matches {
			// A path with a control character is shown quoted (glob.Display).
			if u, err := strconv.Unquote(m); err == nil && strings.HasPrefix(m, `"`) {
				m = u
			}
			abs := m
			if withBase {
				abs = path.Join(opts.Base, m)
			}
			if abs != root && (!strings.HasPrefix(abs, root+"/") || path.Clean(abs) != abs) {
				t.Fatalf("result %q (%q) is not inside %s", m, abs, root)
			}
		}
	})
}
