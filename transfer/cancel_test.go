package transfer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/outputs"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// cancelling cancels a context once the guest command of builtin has
// moved its first bytes: when the command's first output arrives, or when
// the guest has read the first bytes of its stdin.
type cancelling struct {
	session.Session
	builtin string
	cancel  context.CancelFunc
}

func (c *cancelling) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin != c.builtin {
		return c.Session.Shell(ctx, cmd, o)
	}
	if o.Stdout != nil {
		stdout := o.Stdout
		o.Stdout = func(b []byte) {
			stdout(b)
			c.cancel()
		}
	}
	if o.Stdin != nil {
		o.Stdin = &cancelAfterRead{r: o.Stdin, cancel: c.cancel}
	}
	return c.Session.Shell(ctx, cmd, o)
}

// cancelAfterRead cancels after its first read and then, as a writer the
// guest is slow to drain, gives the guest the rest.
type cancelAfterRead struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (c *cancelAfterRead) Read(p []byte) (int, error) {
	n, err := c.r.Read(p[:min(len(p), 4096)])
	c.cancel()
	return n, err
}

// A collection cancelled while its files stream in ends with the cancel
// (ErrAborted and context.Canceled, on every backend),
// writes nothing to dest, and leaves the session as it was: the next
// collection takes everything.
func TestCollectCancelledMidFetchLeavesDestAsItWas(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p d && printf one > a.txt && printf two > d/b.txt && head -c 3000000 /dev/urandom > z.bin`, s.Paths().Outputs))
		dest := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dest, "a.txt"), []byte("host"), 0o644))
		before := snapshot(t, dest)

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &cancelling{Session: s.Session, builtin: agentwire.BuiltinOutputsFetch, cancel: cancel}
		_, err := transfer.Collect(ctx, c, dest, transfer.CollectOptions{Overwrite: true})
		require.ErrorIs(t, err, session.ErrAborted)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, before, snapshot(t, dest), "nothing written, nothing left behind")

		res, err := transfer.Collect(context.Background(), s, dest, transfer.CollectOptions{Overwrite: true})
		require.NoError(t, err)
		assert.Len(t, res.Files, 3)
		got, err := os.ReadFile(filepath.Join(dest, "a.txt"))
		require.NoError(t, err)
		assert.Equal(t, "one", string(got))
	})
}

// An upload cancelled while the guest reads it ends with the cancel and
// leaves no partly written file: whatever the guest placed is whole, no
// temporary file is left, and the same upload made again places it all.
func TestMaterializeCancelledMidStreamLeavesNoPartialFile(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		mounts := func() []transfer.Mount {
			return []transfer.Mount{
				mount(transfer.Upload, p.Uploads+"/a/first.txt", "first"),
				mount(transfer.Upload, p.Uploads+"/b/big.bin", big),
				mount(transfer.Upload, p.Uploads+"/c/last.txt", "last"),
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &cancelling{Session: s.Session, builtin: agentwire.BuiltinExtract, cancel: cancel}
		err := transfer.Materialize(ctx, c, mounts())
		require.ErrorIs(t, err, session.ErrAborted)
		require.ErrorIs(t, err, context.Canceled)

		// Each file found is whole: its size is its mount's.
		sizes := map[string]string{"a/first.txt": "5", "b/big.bin": fmt.Sprint(len(big)), "c/last.txt": "4"}
		listing := sh(t, s, fmt.Sprintf(`cd %q && find . -type f -printf '%%P %%s\n'`, p.Uploads))
		for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
			if line == "" {
				continue
			}
			name, size, _ := strings.Cut(line, " ")
			assert.Equal(t, sizes[name], size, "file %q after the cancel", name)
		}

		require.NoError(t, transfer.Materialize(context.Background(), s, mounts()))
		assert.Equal(t, "a/first.txt 5\nb/big.bin 1048576\nc/last.txt 4\n",
			sh(t, s, fmt.Sprintf(`cd %q && find . -type f -printf '%%P %%s\n' | sort`, p.Uploads)))
	})
}

// cutting passes the first n bytes of the fetch's archive on, then ends
// the call with err once the guest is done: a transport that fails
// mid-file.
type cutting struct {
	session.Session
	n   int
	err error
}

func (c *cutting) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin != agentwire.BuiltinOutputsFetch {
		return c.Session.Shell(ctx, cmd, o)
	}
	stdout, left := o.Stdout, c.n
	o.Stdout = func(b []byte) {
		b = b[:min(len(b), left)]
		left -= len(b)
		if len(b) > 0 {
			stdout(b)
		}
	}
	if _, err := c.Session.Shell(ctx, cmd, o); err != nil {
		return nil, err
	}
	return nil, c.err
}

// A fetch whose call fails mid-file fails with the call's error, not as a
// broken archive: the archive is short because the call ended.
func TestCollectCutShortSaysWhatEndedTheFetch(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && printf one > a.txt && head -c 300000 /dev/urandom > z.bin`, s.Paths().Outputs))
		dest := t.TempDir()
		before := snapshot(t, dest)
		c := &cutting{Session: s.Session, n: 100_000, err: fmt.Errorf("%w: the transport failed", session.ErrChannelBroken)}
		_, err := transfer.Collect(context.Background(), c, dest, transfer.CollectOptions{})
		require.ErrorIs(t, err, session.ErrChannelBroken)
		assert.NotErrorIs(t, err, outputs.ErrUnsafeOutput)
		assert.Equal(t, before, snapshot(t, dest), "nothing written, nothing left behind")
	})
}

// slowing slows the archive of the builtin it names (a fetch's stdout, an
// upload's stdin) to every bytes each period, or, when every is 0, passes
// its first byte and then nothing: a guest that trickles or stops.
type slowing struct {
	session.Session
	builtin string
	every   int
	period  time.Duration
}

func (c *slowing) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin != c.builtin {
		return c.Session.Shell(ctx, cmd, o)
	}
	if cmd.Builtin == agentwire.BuiltinExtract {
		o.Stdin = &slowReader{ctx: ctx, r: o.Stdin, c: c}
		return c.Session.Shell(ctx, cmd, o)
	}
	stdout, r := o.Stdout, &slowReader{ctx: ctx, c: c}
	o.Stdout = func(b []byte) {
		for len(b) > 0 {
			r.r = bytes.NewReader(b)
			n, err := r.Read(b)
			if err != nil {
				return
			}
			stdout(b[:n])
			b = b[n:]
		}
	}
	return c.Session.Shell(ctx, cmd, o)
}

type slowReader struct {
	ctx  context.Context
	r    io.Reader
	c    *slowing
	sent bool
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.c.every == 0 && r.sent {
		<-r.ctx.Done()
		return 0, r.ctx.Err()
	}
	if r.sent {
		select {
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		case <-time.After(r.c.period):
		}
	}
	r.sent = true
	return r.r.Read(p[:min(len(p), max(r.c.every, 1))])
}

// A transfer stops when its archive stops moving, and as a whole when it
// moves slower than the least rate a transport gives; either way it says
// which deadline ended it, leaves nothing half done, and the session
// serves the same transfer again.
func TestTransferDeadlines(t *testing.T) {
	const size = 100000
	// short runs one slowed transfer under deadlines short enough for a
	// test, and bounded should they not fire.
	short := func(stall, base time.Duration, fn func(ctx context.Context) error) error {
		restore := transfer.SetDeadlines(stall, base)
		defer restore()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return fn(ctx)
	}
	for _, tc := range []struct {
		name        string
		every       int
		stall, base time.Duration // the other deadline cannot fire
		want        string
	}{
		{"stalled", 0, time.Second, time.Hour, "no byte of the %s moved for 1s"},
		{"trickled", 1024, time.Hour, time.Second, "bytes) did not end within 3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s *counted) {
				t.Run("collect", func(t *testing.T) {
					sh(t, s, fmt.Sprintf(`cd %q && head -c %d /dev/urandom > z.bin`, s.Paths().Outputs, size))
					dest := t.TempDir()
					before := snapshot(t, dest)
					c := &slowing{Session: s.Session, builtin: agentwire.BuiltinOutputsFetch, every: tc.every, period: 100 * time.Millisecond}
					err := short(tc.stall, tc.base, func(ctx context.Context) error {
						_, err := transfer.Collect(ctx, c, dest, transfer.CollectOptions{})
						return err
					})
					require.ErrorIs(t, err, session.ErrHostTimeout)
					require.ErrorIs(t, err, context.DeadlineExceeded)
					assert.ErrorContains(t, err, strings.ReplaceAll(tc.want, "%s", "outputs' fetch"))
					assert.Equal(t, before, snapshot(t, dest), "nothing written, nothing left behind")
					res, err := transfer.Collect(context.Background(), s, dest, transfer.CollectOptions{})
					require.NoError(t, err)
					assert.Len(t, res.Files, 1)
				})
				t.Run("materialize", func(t *testing.T) {
					p := s.Paths()
					mounts := func() []transfer.Mount {
						return []transfer.Mount{mount(transfer.Upload, p.Uploads+"/big.bin", strings.Repeat("x", size))}
					}
					c := &slowing{Session: s.Session, builtin: agentwire.BuiltinExtract, every: tc.every, period: 100 * time.Millisecond}
					err := short(tc.stall, tc.base, func(ctx context.Context) error { return transfer.Materialize(ctx, c, mounts()) })
					require.ErrorIs(t, err, session.ErrHostTimeout)
					require.ErrorIs(t, err, context.DeadlineExceeded)
					assert.ErrorContains(t, err, strings.ReplaceAll(tc.want, "%s", "upload"))
					assert.Empty(t, sh(t, s, fmt.Sprintf(`find %q -type f`, p.Uploads)), "no partial file")
					require.NoError(t, transfer.Materialize(context.Background(), s, mounts()))
					assert.Equal(t, fmt.Sprintf("big.bin %d\n", size),
						sh(t, s, fmt.Sprintf(`cd %q && find . -type f -printf '%%P %%s\n'`, p.Uploads)))
				})
			})
		})
	}
}
