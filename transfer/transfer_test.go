package transfer_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// counted wraps a Session and counts its Shell and CopyIn calls.
type counted struct {
	session.Session
	n atomic.Int64
	// rewrite, when set, replaces the stdout of Shell calls of the builtin
	// it names: a guest that lies.
	rewrite map[string]func([]byte) []byte
	// before, when set, runs its value as a guest script before each Shell
	// call of the builtin it names: a guest racing the host.
	before map[string]string
}

func (c *counted) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	c.n.Add(1)
	for key, script := range c.before {
		if cmd.Builtin == key {
			if res, err := c.Session.Shell(ctx, session.Command{Script: script}, session.ShellOptions{}); err != nil || res.ExitCode != 0 {
				return nil, fmt.Errorf("before %q: %v %+v", key, err, res)
			}
		}
	}
	for key, fn := range c.rewrite {
		if cmd.Builtin == key {
			res, err := c.Session.Shell(ctx, cmd, session.ShellOptions{Stdin: o.Stdin, User: o.User, MaxOutput: o.MaxOutput})
			if err != nil {
				return res, err
			}
			res.Stdout = fn(res.Stdout)
			if o.Stdout != nil {
				o.Stdout(res.Stdout)
				res.Stdout = nil
			}
			return res, nil
		}
	}
	return c.Session.Shell(ctx, cmd, o)
}

// backends runs fn on every backend, or on those OMA_TEST_BACKENDS names
// (the real ones boot microVMs: scripts/real-vm.sh).
func backends(t *testing.T, fn func(t *testing.T, s *counted)) {
	type backend struct {
		name string
		open func(t *testing.T) session.Session
	}
	all := []backend{
		{"host", func(t *testing.T) session.Session { return sessiontest.NewHost(t) }},
		{"msb", func(t *testing.T) session.Session { return openMsb(t, false) }},
		{"msb-channel", func(t *testing.T) session.Session { return openMsb(t, true) }},
		{"local", openLocal},
		{"real-msb", func(t *testing.T) session.Session { s, _ := realvm.Open(t, false); return s }},
		{"real-msb-channel", func(t *testing.T) session.Session { s, _ := realvm.Open(t, true); return s }},
	}
	chosen := realvm.Backends()
	if chosen == nil {
		chosen = []string{"host", "msb", "msb-channel", "local"}
	}
	for _, name := range chosen {
		i := slices.IndexFunc(all, func(b backend) bool { return b.name == name })
		require.GreaterOrEqual(t, i, 0, "OMA_TEST_BACKENDS names %q, not one of transfer's backends", name)
		t.Run(name, func(t *testing.T) { fn(t, &counted{Session: all[i].open(t)}) })
	}
}

// openMsb creates a session on fakemsb: over one exec per call, or over the
// guest agent's channel.
func openMsb(t *testing.T, channel bool) session.Session {
	env := fakemsbtest.New(t)
	o := microvm.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "w", SessionID: "s", Image: "debian",
		NoChannel: !channel, AgentFile: agenttest.AgentBinary(t),
	}
	s, err := microvm.Create(context.Background(), o)
	require.NoError(t, err)
	env.ResetLog(t)
	t.Cleanup(func() {
		require.NoError(t, s.Close(context.Background()))
		require.True(t, env.Channel(s.Name()).Empty(), "channel processes left")
		for _, inv := range env.Invocations(t) {
			if channel && inv.Argv[0] == "exec" {
				require.Contains(t, inv.Argv, "--stream", "a call left the channel")
			}
		}
	})
	return s
}

func openLocal(t *testing.T) session.Session {
	s, err := local.Create(context.Background(), local.Options{StateDir: t.TempDir(), WorkspaceID: "w", SessionID: "s"})
	if err != nil {
		t.Skipf("no local backend here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	return s
}

func mount(kind transfer.Kind, path, content string) transfer.Mount {
	sum := sha256.Sum256([]byte(content))
	return transfer.Mount{Kind: kind, Path: path, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), Content: strings.NewReader(content)}
}

func sh(t *testing.T, s session.Session, script string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script}, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	return string(res.Stdout)
}

func TestMaterialize(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		mounts := []transfer.Mount{
			mount(transfer.Upload, p.Uploads+"/data/a.csv", "a,b\n1,2\n"),
			mount(transfer.Upload, p.Uploads+"/top.txt", "top"),
			mount(transfer.Skill, p.Skills+"/pdf/SKILL.md", "# pdf"),
			mount(transfer.Skill, p.Skills+"/pdf/scripts/run.sh", "#!/bin/sh\necho ran\n"),
		}
		for i := 0; i < 40; i++ {
			mounts = append(mounts, mount(transfer.Upload, fmt.Sprintf("%s/many/f%02d", p.Uploads, i), fmt.Sprint(i)))
		}
		require.NoError(t, transfer.Materialize(context.Background(), s, mounts))
		assert.EqualValues(t, 2, s.n.Load(), "one guest command per kind")

		out := sh(t, s, fmt.Sprintf(`cd %q && stat -c '%%a %%n' data data/a.csv top.txt many/f07 && cd %q && stat -c '%%a %%n' pdf pdf/SKILL.md pdf/scripts pdf/scripts/run.sh && cat %q/data/a.csv`, p.Uploads, p.Skills, p.Uploads))
		assert.Equal(t, "755 data\n444 data/a.csv\n444 top.txt\n444 many/f07\n755 pdf\n444 pdf/SKILL.md\n755 pdf/scripts\n555 pdf/scripts/run.sh\na,b\n1,2\n", out)
	})
}

func TestMaterializeRefusesBeforeAnyGuestCall(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		bad := func(m transfer.Mount, f func(*transfer.Mount)) transfer.Mount { f(&m); return m }
		cases := []struct {
			name string
			m    transfer.Mount
			want error
		}{
			{"digest mismatch", bad(mount(transfer.Upload, p.Uploads+"/x", "payload"), func(m *transfer.Mount) { m.SHA256 = strings.Repeat("0", 64) }), transfer.ErrIntegrity},
			{"short content", bad(mount(transfer.Upload, p.Uploads+"/x", "payload"), func(m *transfer.Mount) { m.Size = 100 }), transfer.ErrIntegrity},
			{"long content", bad(mount(transfer.Upload, p.Uploads+"/x", "payload"), func(m *transfer.Mount) { m.Size = 3 }), transfer.ErrIntegrity},
			{"escape", mount(transfer.Upload, p.Uploads+"/../etc/passwd", "x"), transfer.ErrPath},
			{"prefix trick", mount(transfer.Upload, p.Uploads+"-escape/x", "x"), transfer.ErrPath},
			{"the root itself", mount(transfer.Upload, p.Uploads, "x"), transfer.ErrPath},
			{"relative", mount(transfer.Upload, "x.txt", "x"), transfer.ErrPath},
			{"skill outside skills", mount(transfer.Skill, p.Uploads+"/x", "x"), transfer.ErrPath},
			{"unknown kind", mount("other", p.Uploads+"/x", "x"), transfer.ErrPath},
			{"twice", mount(transfer.Upload, p.Uploads+"/ok.txt", "ok"), transfer.ErrPath},
		}
		for _, c := range cases {
			good := mount(transfer.Upload, p.Uploads+"/ok.txt", "ok")
			err := transfer.Materialize(context.Background(), s, []transfer.Mount{good, c.m})
			assert.ErrorIs(t, err, c.want, c.name)
		}
		assert.EqualValues(t, 0, s.n.Load(), "nothing reaches the guest")
		assert.Equal(t, "", sh(t, s, "ls -A "+p.Uploads), "nothing was written")
	})
}

// The agent owns /workspace: a skills root it turned into a symlink must
// not make root write where the agent cannot (here the uploads root).
func TestMaterializeSkillsNeverWriteAsRootThroughAgentLinks(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		if _, ok := s.Session.(*sessiontest.Host); ok {
			t.Skip("the host session has no agent user")
		}
		p := s.Paths()
		sh(t, s, fmt.Sprintf(`rm -rf %q && ln -s %q %q`, p.Skills, p.Uploads, p.Skills))
		err := transfer.Materialize(context.Background(), s, []transfer.Mount{mount(transfer.Skill, p.Skills+"/demo/SKILL.md", "# demo")})
		assert.Error(t, err, "the agent's own rights do not reach the uploads root")
		assert.Equal(t, "", sh(t, s, "ls -A "+p.Uploads), "nothing written as root through the agent's link")

		// A skills tree the agent prepared with links inside is written
		// through them only where the agent could write anyway.
		sh(t, s, fmt.Sprintf(`rm %q && mkdir -p %q/demo && ln -s %q %q/demo/scripts`, p.Skills, p.Skills, p.Uploads, p.Skills))
		err = transfer.Materialize(context.Background(), s, []transfer.Mount{mount(transfer.Skill, p.Skills+"/demo/scripts/run.sh", "#!/bin/sh\n")})
		t.Log(err)
		assert.Equal(t, "", sh(t, s, "ls -A "+p.Uploads))
	})
}

// Uploads are extracted as root only below a root that nobody else can
// write: a root the agent could have prepared is refused.
func TestMaterializeUploadsRefuseARootOthersCanWrite(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		if _, ok := s.Session.(*sessiontest.Host); !ok {
			t.Skip("the backends' uploads roots are root's own; only the host session can loosen its own")
		}
		require.NoError(t, os.Chmod(p.Uploads, 0o777))
		err := transfer.Materialize(context.Background(), s, []transfer.Mount{mount(transfer.Upload, p.Uploads+"/x", "x")})
		assert.ErrorContains(t, err, "not owned by")
		require.NoError(t, os.Chmod(p.Uploads, 0o755))
		if os.Geteuid() == 0 {
			require.NoError(t, os.Chown(p.Uploads, 65534, 65534))
			err = transfer.Materialize(context.Background(), s, []transfer.Mount{mount(transfer.Upload, p.Uploads+"/x", "x")})
			assert.ErrorContains(t, err, "not owned by 0 alone", "a root the agent owns")
			require.NoError(t, os.Chown(p.Uploads, 0, 0))
		}
		require.NoError(t, transfer.Materialize(context.Background(), s, []transfer.Mount{mount(transfer.Upload, p.Uploads+"/x", "x")}))
	})
}

// Even a link planted below the uploads root (only root could: the agent
// cannot write there) is replaced by the directory the upload names, never
// followed.
func TestMaterializeUploadsNeverFollowPlantedLinks(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		res, err := s.Shell(context.Background(), session.Command{
			Script: `mkdir -p "$2/target" && ln -s "$2/target" "$1/x"`, Args: []string{p.Uploads, p.Workspace},
		}, session.ShellOptions{User: "0"})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, string(res.Stderr))
		require.NoError(t, transfer.Materialize(context.Background(), s, []transfer.Mount{mount(transfer.Upload, p.Uploads+"/x/f.txt", "data")}))
		assert.Equal(t, "", sh(t, s, fmt.Sprintf("ls -A %q/target", p.Workspace)), "nothing written through the link")
		assert.Equal(t, "data", sh(t, s, fmt.Sprintf("test ! -L %q/x && cat %q/x/f.txt", p.Uploads, p.Uploads)))
	})
}

// untouched is content that fails the test if Materialize reads it.
type untouched struct{ t *testing.T }

func (u untouched) Read([]byte) (int, error) {
	u.t.Error("content read past a limit")
	return 0, io.EOF
}

// Uploads and skills are bounded per call and per session: mounts whose
// sizes add up past a limit are refused with the limit and the size named,
// before any content is read or any guest command runs; a refused call
// counts nothing against the session.
func TestMaterializeRefusesPastItsLimits(t *testing.T) {
	s := &counted{Session: sessiontest.NewHost(t)}
	p := s.Paths()
	ctx := context.Background()
	huge := transfer.Mount{Kind: transfer.Upload, Path: p.Uploads + "/huge", Size: transfer.DefaultMaxCallBytes + 1,
		SHA256: strings.Repeat("0", 64), Content: untouched{t}}
	err := transfer.Materialize(ctx, s, []transfer.Mount{huge})
	require.ErrorIs(t, err, transfer.ErrTooLarge)
	assert.Contains(t, err.Error(), fmt.Sprintf("%d bytes in one call, over the per-call limit of %d bytes", transfer.DefaultMaxCallBytes+1, transfer.DefaultMaxCallBytes))

	q := &transfer.Quota{Limits: transfer.Limits{PerCall: 10, PerSession: 15}}
	split := []transfer.Mount{mount(transfer.Upload, p.Uploads+"/a", "123456"), mount(transfer.Skill, p.Skills+"/s/SKILL.md", "123456")}
	split[1].Content = untouched{t}
	err = q.Materialize(ctx, s, split)
	require.ErrorIs(t, err, transfer.ErrTooLarge)
	assert.Contains(t, err.Error(), "12 bytes in one call, over the per-call limit of 10 bytes")
	bad := mount(transfer.Upload, p.Uploads+"/bad", "1234567")
	bad.SHA256 = strings.Repeat("0", 64)
	require.ErrorIs(t, q.Materialize(ctx, s, []transfer.Mount{bad}), transfer.ErrIntegrity)
	require.EqualValues(t, 0, s.n.Load(), "a guest command ran")

	require.NoError(t, q.Materialize(ctx, s, []transfer.Mount{mount(transfer.Upload, p.Uploads+"/b", "12345678")}))
	over := mount(transfer.Upload, p.Uploads+"/c", "12345678")
	over.Content = untouched{t}
	err = q.Materialize(ctx, s, []transfer.Mount{over})
	require.ErrorIs(t, err, transfer.ErrTooLarge)
	assert.Contains(t, err.Error(), "8 bytes after the 8 already placed, over the per-session limit of 15 bytes")
	assert.EqualValues(t, 1, s.n.Load(), "guest commands")
	assert.Equal(t, "b\n", sh(t, s, "ls -A "+p.Uploads))
}
