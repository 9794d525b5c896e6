//go:build linux

package realmsb_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// target is the msb a scenario runs on: the real one, booting microVMs
// (the TestRealMSB tests, which skip where none boots), or fakemsb (the
// TestFakeMSB tests), which proves each scenario on every host.
type target struct {
	client *msb.Client
	// agentFile is the guest agent sessions get: fakemsb's come from a
	// fresh build, the real VM's from the test binary's bundle.
	agentFile string
	opTimeout time.Duration
}

func realTarget(t *testing.T) target {
	vm := realvm.Booting(t, microvm.DefaultImage)
	return target{client: msb.NewClient(vm.CLI()), opTimeout: realvm.OperationTimeout}
}

func fakeTarget(t *testing.T) target {
	env := fakemsbtest.New(t)
	return target{client: msb.NewClient(&msb.CLI{Path: env.Bin}), agentFile: agenttest.AgentBinary(t)}
}

// options are a session's on the target, over the guest agent's channel.
func (tg target) options(sessionID string) microvm.Options {
	return microvm.Options{
		Client: tg.client, WorkspaceID: "e2e", SessionID: sessionID,
		AgentFile: tg.agentFile, OperationTimeout: tg.opTimeout,
	}
}

// create opens a session, closed when the test ends.
func (tg target) create(t *testing.T, sessionID string) *microvm.Session {
	t.Helper()
	s, err := microvm.Create(context.Background(), tg.options(sessionID))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// volumeDir is where msb keeps a dir volume's files on the host.
func (tg target) volumeDir(t *testing.T, volume string) string {
	t.Helper()
	text, err := tg.client.VolumeInspect(context.Background(), volume)
	require.NoError(t, err)
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "Path" {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("msb volume inspect %s names no path:\n%s", volume, text)
	return ""
}

func toolCall(t *testing.T, s session.Session, name string, input any) string {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	out, err := tools.New(s, tools.Options{}).Call(context.Background(), name, raw, nil)
	require.NoError(t, err, "%s %s", name, raw)
	return out
}

func requireOnChannel(t *testing.T, s *microvm.Session) {
	t.Helper()
	served := s.Served()
	require.Zero(t, served.Exec, "a call fell back to one msb exec: %+v", served)
	require.NotZero(t, served.Channel, "no call went over the channel")
}

func TestRealMSBPoisonKeepsTheWorkspace(t *testing.T) { poisonKeepsTheWorkspace(t, realTarget(t)) }
func TestFakeMSBPoisonKeepsTheWorkspace(t *testing.T) { poisonKeepsTheWorkspace(t, fakeTarget(t)) }

// poisonKeepsTheWorkspace: a poisoned session's sandbox is stopped, with
// everything running in it, and answers no call; the agent's files stay in
// the workspace volume, on the host, until Close.
func poisonKeepsTheWorkspace(t *testing.T, tg target) {
	ctx := context.Background()
	s := tg.create(t, "poison")
	toolCall(t, s, "write", map[string]any{"path": "notes.txt", "content": "kept\n"})
	toolCall(t, s, "bash", map[string]any{"command": "sleep 300 >/dev/null 2>&1 & echo started"})
	requireOnChannel(t, s)

	err := s.Poison(ctx, errors.New("no readiness marker"))
	require.ErrorIs(t, err, session.ErrPoisoned)
	assert.Contains(t, err.Error(), s.Names().Volume, "the error names the kept volume")
	_, err = s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{})
	require.ErrorIs(t, err, session.ErrPoisoned)

	info, err := tg.client.Inspect(ctx, s.Name())
	require.NoError(t, err)
	assert.True(t, msb.Stopped(info.Status), "the poisoned sandbox is %q", info.Status)
	note := filepath.Join(tg.volumeDir(t, s.Names().Volume), "notes.txt")
	data, err := os.ReadFile(note)
	require.NoError(t, err, "the agent's file is in the kept volume")
	assert.Equal(t, "kept\n", string(data))
	fi, err := os.Lstat(note)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	t.Logf("on the host the guest's file is %v, uid %d gid %d", fi.Mode(), st.Uid, st.Gid)

	require.NoError(t, s.Close(ctx), "only Close removes the workspace")
	requireLeft(t, tg.client, nil, nil)
}

func TestRealMSBPauseAndResume(t *testing.T) { pauseAndResume(t, realTarget(t)) }
func TestFakeMSBPauseAndResume(t *testing.T) { pauseAndResume(t, fakeTarget(t)) }

// pauseAndResume: a pause stops the VM and everything in it and keeps the
// workspace; the next call resumes it and reopens the channel.
func pauseAndResume(t *testing.T, tg target) {
	ctx := context.Background()
	s := tg.create(t, "pause")
	toolCall(t, s, "write", map[string]any{"path": "before.txt", "content": "written before the pause\n"})
	toolCall(t, s, "bash", map[string]any{"command": "sleep 300.9 >/dev/null 2>&1 & echo started"})

	require.NoError(t, s.Pause(ctx))
	info, err := tg.client.Inspect(ctx, s.Name())
	require.NoError(t, err)
	assert.True(t, msb.Stopped(info.Status), "the paused sandbox is %q", info.Status)
	stats, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.StatePaused, stats.State)
	require.NoError(t, s.Pause(ctx), "pausing a paused session")

	assert.Equal(t, "written before the pause\n", toolCall(t, s, "read", map[string]any{"path": "before.txt"}), "the call resumed the session")
	assert.Equal(t, "none\n", toolCall(t, s, "bash", map[string]any{"command": "pgrep -f 'sleep 300.9' || echo none"}), "the pause ended the guest's processes")
	stats, err = s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.StateRunning, stats.State)
	requireOnChannel(t, s)

	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Resume(ctx))
	require.NoError(t, s.Resume(ctx), "resuming a running session")
	assert.Equal(t, "written before the pause\n", toolCall(t, s, "read", map[string]any{"path": "before.txt"}))
	requireOnChannel(t, s)
	require.NoError(t, s.Close(ctx))
	requireLeft(t, tg.client, nil, nil)
}

func TestRealMSBFork(t *testing.T) { fork(t, realTarget(t)) }
func TestFakeMSBFork(t *testing.T) { fork(t, fakeTarget(t)) }

// fork: the fork starts with the source's workspace and root disk (its
// agent too), then the two diverge; a guest's link is copied as a link,
// never followed on the host; nothing is left once both are closed.
func fork(t *testing.T, tg target) {
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	src := tg.create(t, "source")
	toolCall(t, src, "bash", map[string]any{"command": "mkdir -p d && printf base >d/note.txt && ln -s " + secret + " leak && echo root-disk >/tmp/on-root-disk"})

	f, err := src.Fork(ctx, tg.options("fork"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	assert.Equal(t, src.Name(), mustInspect(t, tg, f.Name()).Labels[session.LabelParent])
	assert.Equal(t, secret+"\n", toolCall(t, f, "bash", map[string]any{"command": "readlink leak"}), "the guest's link is copied as a link")
	// Whatever keeps the link in the fork's volume (a host symlink on
	// fakemsb; on the real msb a file whose link-ness lives in an xattr),
	// the copy never followed it to the host's file.
	info, err := os.Lstat(filepath.Join(tg.volumeDir(t, f.Names().Volume), "leak"))
	require.NoError(t, err)
	if info.Mode().IsRegular() {
		data, err := os.ReadFile(filepath.Join(tg.volumeDir(t, f.Names().Volume), "leak"))
		require.NoError(t, err)
		assert.NotContains(t, string(data), "host secret")
	}

	toolCall(t, src, "bash", map[string]any{"command": "printf ' src' >>d/note.txt"})
	toolCall(t, f, "bash", map[string]any{"command": "printf ' fork' >>d/note.txt"})
	assert.Equal(t, "base src", toolCall(t, src, "read", map[string]any{"path": "d/note.txt"}))
	assert.Equal(t, "base fork", toolCall(t, f, "read", map[string]any{"path": "d/note.txt"}))
	requireOnChannel(t, src)
	requireOnChannel(t, f)

	require.NoError(t, src.Close(ctx))
	assert.Equal(t, "base fork", toolCall(t, f, "read", map[string]any{"path": "d/note.txt"}), "the fork outlives its source")
	require.NoError(t, f.Close(ctx))
	requireLeft(t, tg.client, nil, nil)
	snaps, err := tg.client.SnapshotList(ctx)
	require.NoError(t, err)
	assert.Empty(t, snaps, "snapshots left")
	data, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(data))
}

func mustInspect(t *testing.T, tg target, name string) *msb.SandboxInfo {
	t.Helper()
	info, err := tg.client.Inspect(context.Background(), name)
	require.NoError(t, err)
	return info
}

func TestRealMSBExecBuiltins(t *testing.T) { execBuiltins(t, realTarget(t)) }
func TestFakeMSBExecBuiltins(t *testing.T) { execBuiltins(t, fakeTarget(t)) }

// execBuiltins: with the channel off, each tool call is one msb exec of the
// guest agent's builtin, not of its script: on the session that placed the
// agent, and on one attached to it (as the one-shot CLI does).
func execBuiltins(t *testing.T, tg target) {
	s := tg.create(t, "execbuiltins")
	s.DisableAgentChannel()
	toolCall(t, s, "write", map[string]any{"path": "notes.txt", "content": "alpha\nbeta\n"})
	assert.Contains(t, toolCall(t, s, "read", map[string]any{"path": "notes.txt"}), "beta")
	toolCall(t, s, "edit", map[string]any{"path": "notes.txt", "oldText": "beta", "newText": "gamma"})
	assert.Contains(t, toolCall(t, s, "ls", map[string]any{"path": "."}), "notes.txt")
	assert.Contains(t, toolCall(t, s, "glob", map[string]any{"pattern": "*.txt"}), "notes.txt")
	assert.Contains(t, toolCall(t, s, "grep", map[string]any{"pattern": "gamma", "path": "/workspace"}), "notes.txt")
	assert.Equal(t, "hi\n", toolCall(t, s, "bash", map[string]any{"command": "echo hi"}))
	served := s.Served()
	assert.Zero(t, served.Channel, "%+v", served)
	for _, b := range []string{"write", "read", "cat", "ls", "glob-enumerate", "grep-search", "bash-supervisor"} {
		assert.NotZero(t, served.Builtins[b], "builtin %s did not run: %+v", b, served)
	}
	assert.Equal(t, served.Exec, sumValues(served.Builtins), "every call ran a builtin: %+v", served)

	attached, err := microvm.Attach(tg.client, "", s.Name())
	require.NoError(t, err)
	attached.DisableAgentChannel()
	assert.Contains(t, toolCall(t, attached, "read", map[string]any{"path": "notes.txt"}), "gamma")
	assert.Equal(t, microvm.Served{Exec: 1, Builtins: map[string]int{"read": 1}}, attached.Served())
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestRealMSBProgramServesAsItsOwnAgent(t *testing.T) { ownAgent(t, realTarget(t)) }
func TestFakeMSBProgramServesAsItsOwnAgent(t *testing.T) { ownAgent(t, fakeTarget(t)) }

// ownAgent: a program that links the msb backend serves as the guest agent
// when the guest starts it as one (package selfagent), as a build without
// the bundled agent does: this test binary, placed as the agent, answers
// the channel's calls and one exec's builtin. (The real-VM suite builds
// it static, as such a build must be to run in any guest.)
func ownAgent(t *testing.T, tg target) {
	self, err := os.Executable()
	require.NoError(t, err)
	tg.agentFile = self
	s := tg.create(t, "ownagent")
	toolCall(t, s, "write", map[string]any{"path": "own.txt", "content": "served by the test binary\n"})
	assert.Equal(t, "served by the test binary\n", toolCall(t, s, "read", map[string]any{"path": "own.txt"}))
	assert.Equal(t, "hi\n", toolCall(t, s, "bash", map[string]any{"command": "echo hi"}))
	requireOnChannel(t, s)
	assert.Equal(t, map[string]int{"write": 1, "read": 1, "bash-supervisor": 1}, s.Served().Builtins)

	s.DisableAgentChannel()
	assert.Contains(t, toolCall(t, s, "ls", map[string]any{"path": "."}), "own.txt")
	assert.Equal(t, 1, s.Served().Builtins["ls"], "%+v", s.Served())
}

// TestRealMSBGuestNeedsOnlyBashAndRg: once the image's coreutils,
// findutils, tar, procps and util-linux are gone from a running sandbox,
// every tool, an upload of files and skills and an output collection still
// work, over the channel and by one exec each: of the image, oma-sandbox
// runs only bash and rg. (fakemsb's guests see the host's own binaries,
// which a test cannot take away, so this runs on the real VM only.)
func TestRealMSBGuestNeedsOnlyBashAndRg(t *testing.T) {
	tg := realTarget(t)
	s := tg.create(t, "bashandrg")
	ctx := context.Background()
	// dpkg lists each package's programs; mv, itself among them, goes last.
	res, err := s.Shell(ctx, session.Command{Script: `set -eu
mkdir /root/gone
progs=$(dpkg -L coreutils findutils tar procps util-linux | grep -E '^/(usr/)?s?bin/[^/]+$' | grep -v '/mv$' | sort -u)
n=0
for p in $progs; do [ -f "$p" ] && [ ! -L "$p" ] && files+=("$p") && n=$((n + 1)); done
mv -t /root/gone -- "${files[@]}" "$(command -v mv)"
hash -r
for p in find tar chown chmod mktemp sha256sum sort xargs stat cat rm mkdir ln setsid mv; do
  if command -v "$p" >/dev/null; then echo "still there: $p" >&2; exit 1; fi
done
echo "$n"`}, session.ShellOptions{User: "0"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	t.Logf("programs taken away: %s", strings.TrimSpace(string(res.Stdout)))

	exercise := func(name string) {
		toolCall(t, s, "write", map[string]any{"path": name, "content": "alpha\nbeta\n"})
		toolCall(t, s, "edit", map[string]any{"path": name, "oldText": "beta", "newText": "gamma"})
		assert.Contains(t, toolCall(t, s, "read", map[string]any{"path": name}), "gamma")
		assert.Contains(t, toolCall(t, s, "ls", map[string]any{"path": "."}), name)
		assert.Contains(t, toolCall(t, s, "glob", map[string]any{"pattern": "**/*.txt"}), name)
		assert.Contains(t, toolCall(t, s, "grep", map[string]any{"pattern": "gamma", "path": "/workspace"}), name)
		assert.Equal(t, "hi\n", toolCall(t, s, "bash", map[string]any{"command": "echo hi > " + s.Paths().Outputs + "/" + name + " && echo hi"}))
		p := s.Paths()
		require.NoError(t, transfer.Materialize(ctx, s, []transfer.Mount{
			mountOf(transfer.Upload, p.Uploads+"/"+name, "upload"),
			mountOf(transfer.Skill, p.Skills+"/demo/scripts/"+name, "#!/bin/bash\n"),
		}))
		res, err := transfer.Collect(ctx, s, t.TempDir(), transfer.CollectOptions{})
		require.NoError(t, err)
		assert.Contains(t, fmt.Sprint(res.Files), name)
	}
	exercise("channel.txt")
	requireOnChannel(t, s)
	s.DisableAgentChannel()
	exercise("exec.txt")
	assert.NotZero(t, s.Served().Exec)
}

func mountOf(kind transfer.Kind, path, content string) transfer.Mount {
	sum := sha256.Sum256([]byte(content))
	return transfer.Mount{Kind: kind, Path: path, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), Content: strings.NewReader(content)}
}
