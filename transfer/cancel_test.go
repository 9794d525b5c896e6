package transfer_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
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
