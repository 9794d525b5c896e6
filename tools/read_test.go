package tools_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// offset 0 reads from the start, as the seed does.
func TestReadOffsetZero(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		mustCall(t, tb, "write", obj{"path": "z.txt", "content": "one\ntwo\n"})
		assert.Equal(t, "one\ntwo\n", mustCall(t, tb, "read", obj{"path": "z.txt", "offset": 0}))
		assert.Equal(t, "one\n\n[2 more lines in file. Use offset=2 to continue.]", mustCall(t, tb, "read", obj{"path": "z.txt", "offset": 0, "limit": 1}))
	})
}

// A binary file is described, not dumped.
func TestReadBinaryFile(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `printf '\177ELF\002\001\001\000' > app && head -c 151000 /dev/zero >> app && printf '\211PNG\r\n\032\n\000\000' > pic.png && printf 'text then\000nul' > mixed.dat`)
		assert.Equal(t, "[Binary file: app, 147.5KB (151008 bytes), ELF executable or library. read shows text only; inspect it with bash, e.g. od -c app | head]",
			mustCall(t, tb, "read", obj{"path": "app"}))
		assert.Contains(t, mustCall(t, tb, "read", obj{"path": "pic.png"}), ", image/png.")
		assert.Contains(t, mustCall(t, tb, "read", obj{"path": "mixed.dat"}), "[Binary file: mixed.dat, 13B (13 bytes), application/octet-stream.")
	})
}

// Every path in read's hints is shell-quoted: running the hint never runs
// what the name holds.
func TestReadHintsAreShellQuoted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		long := "short\n" + strings.Repeat("y", 60*1024) + "\n"
		for name, quoted := range map[string]string{
			"my long.txt":                 `'my long.txt'`,
			"$(echo INJECTED>&2).txt":     `'$(echo INJECTED>&2).txt'`,
			"it's.txt":                    `'it'\''s.txt'`,
			"-n.txt":                      `./-n.txt`,
			"plain/dir-1/file_2.v1.0.txt": `plain/dir-1/file_2.v1.0.txt`,
		} {
			mustCall(t, tb, "write", obj{"path": name, "content": long})
			out := mustCall(t, tb, "read", obj{"path": name, "offset": 2})
			assert.Equal(t, "[Line 2 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '2p' "+quoted+" | head -c 51200]", out, name)
			hint := strings.TrimSuffix(strings.TrimPrefix(out, "[Line 2 is 60.0KB, exceeds 50.0KB limit. Use bash: "), "]")
			res, err := s.Shell(context.Background(), session.Command{Script: hint + " | wc -c"}, session.ShellOptions{})
			require.NoError(t, err)
			assert.Equal(t, "51200\n", string(res.Stdout), name)
			assert.Empty(t, string(res.Stderr), name)
		}
	})
}

// read, ls and glob open the session's uploads (read-only to the agent).
func TestReadOnlyToolsOpenUploads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		host := filepath.Join(t.TempDir(), "proj")
		require.NoError(t, os.MkdirAll(filepath.Join(host, "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(host, "data", "d12.csv"), []byte("a,b\n1,2\n"), 0o644))
		up := s.Paths().Uploads
		require.NoError(t, s.CopyIn(context.Background(), host, up+"/proj"))

		assert.Equal(t, up+"/proj/data/d12.csv", mustCall(t, tb, "grep", obj{"pattern": "1,2", "path": up}))
		assert.Equal(t, "a,b\n1,2\n", mustCall(t, tb, "read", obj{"path": up + "/proj/data/d12.csv"}))
		assert.Equal(t, "d12.csv", mustCall(t, tb, "ls", obj{"path": up + "/proj/data"}))
		assert.Equal(t, up+"/proj/data/d12.csv", mustCall(t, tb, "glob", obj{"pattern": "*.csv", "path": up}))
		_, err := call(t, tb, "write", obj{"path": up + "/proj/new.txt", "content": "x"})
		assert.ErrorIs(t, err, tools.ErrPathEscape, "write stays in the workspace")
	})
}

// cutSession loses the second half of every command's stdout while the
// command still exits 0, as a transport that cuts output short would.
type cutSession struct{ session.Session }

func (c cutSession) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	res, err := c.Session.Shell(ctx, cmd, o)
	if res != nil {
		res.Stdout = res.Stdout[:len(res.Stdout)/2]
	}
	return res, err
}

// Output cut short is an error, never a shorter file.
func TestReadRefusesCutOutput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		mustCall(t, tools.New(s, tools.Options{}), "write", obj{"path": "a.txt", "content": "alpha\nbeta\ngamma\n"})
		_, err := call(t, tools.New(cutSession{s}, tools.Options{}), "read", obj{"path": "a.txt"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "read a.txt: the guest's output was cut short")
		assert.ErrorIs(t, err, glob.ErrMalformed)
	})
}

// Python leaves no __pycache__ in the workspace: the local backend sets the
// variable, and msb gets it from the image (fakemsb applies the guest
// image's config); the host stand-in has no environment of its own.
func TestGuestEnvKeepsBytecodeOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		if onBackend(t, "host") {
			t.Skip("the host stand-in runs with the test's own environment")
		}
		assert.Equal(t, "1\n", sh(t, s, `echo "${PYTHONDONTWRITEBYTECODE-unset}"`))
	})
}
