package microvm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// A build without the bundled agent places itself in the guest when it
// can serve as the agent there (a static Linux build: this test binary
// stands in for one, fakemsb's guest sharing the host's libraries), and
// its calls run their builtins over the channel. When it cannot, Create
// fails, saying why and how to fix it, before msb is asked for anything.
func TestABuildWithoutTheBundledAgentServesAsItsOwnInTheGuest(t *testing.T) {
	write := session.Command{Builtin: agentwire.BuiltinWrite, Args: []string{"/workspace/f.txt", "", "/workspace", "f.txt"}}
	for _, selfServes := range []bool{true, false} {
		t.Run(map[bool]string{true: "static", false: "cgo"}[selfServes], func(t *testing.T) {
			t.Cleanup(microvm.WithoutBundledAgent(selfServes))
			env := fakemsbtest.New(t)
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			o := options(env)
			o.NoChannel = false
			if !selfServes {
				_, err := microvm.Create(context.Background(), o)
				require.ErrorIs(t, err, session.ErrNoAgent)
				assert.ErrorContains(t, err, "cannot serve as its own: test: it cannot")
				assert.ErrorContains(t, err, "CGO_ENABLED=0")
				assert.Empty(t, env.Invocations(t), "msb was not asked for anything")
				copies, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "oma-sandbox", "agent", "oma-sandbox-self-*"))
				assert.Empty(t, copies)
				return
			}
			s := createSession(t, o)

			res, err := s.Shell(context.Background(), write, session.ShellOptions{Stdin: strings.NewReader("body\n")})
			require.NoError(t, err)
			n := s.Served()
			copies, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "oma-sandbox", "agent", "oma-sandbox-self-*"))
			require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
			assert.Equal(t, map[string]int{agentwire.BuiltinWrite: 1}, n.Builtins)
			assert.Equal(t, 1, n.Channel)
			assert.Equal(t, "body\n", sh(t, s, "cat /workspace/f.txt"))
			require.Len(t, copies, 1, "the program's own copy was placed")
			fi, err := os.Stat(copies[0])
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o500), fi.Mode().Perm(), "only its owner reads and runs it")
		})
	}
}
