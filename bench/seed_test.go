package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/grep"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// seed replays, against one sandbox, the msb invocations the seed
// (open-managed-agents 0.1.0, microsandbox.js) makes for each operation: the
// same execs in the same order, each `/bin/bash -lc SCRIPT` with the seed's
// exec flags. Where this project does the same job (the grep preflight,
// the glob and grep searches and their cleanups, the bash protocol) the
// replay runs ours (the guest agent's builtin, placed by the seed's create
// as ours places it, run by that exec's bash), so a difference in time
// comes from the round trips, not from the work.
type seed struct {
	client  *msb.Client
	sandbox string
	volume  string
}

const (
	seedWorkspace    = "/workspace"
	seedOpTimeout    = 10 * time.Second
	seedHostGrace    = 2 * time.Second
	seedAuxTimeout   = 3 * time.Second // preflight and search cleanup
	seedGuestTimeout = "10s"
)

// seedExec is one of the seed's shell calls.
type seedExec struct {
	script  string
	args    []string
	user    string
	stdin   []byte
	stdout  func([]byte)
	noGuest bool          // the seed passes guestTimeout: false
	host    time.Duration // 0: the operation timeout plus the grace
}

func (s *seed) exec(ctx context.Context, x seedExec) (*msb.Result, error) {
	// The seed runs every step but the mount preparation as the image's
	// default user and never hands the fresh (root-owned) volume to anyone,
	// so it works only with an image whose user is root. Ours runs as 65534,
	// under which its preflight cannot create its scratch directory; root
	// keeps the replay doing the seed's work, call for call.
	user := x.user
	if user == "" {
		user = "0"
	}
	o := msb.ExecOptions{
		Name:    s.sandbox,
		Argv:    append([]string{"/bin/bash", "-lc", x.script, "bash"}, x.args...),
		Workdir: seedWorkspace,
		User:    user,
		Stream:  x.stdin != nil || x.stdout != nil,
	}
	if !x.noGuest {
		o.Timeout = seedGuestTimeout
	}
	host := x.host
	if host == 0 {
		host = seedOpTimeout + seedHostGrace
	}
	ctx, cancel := context.WithTimeout(ctx, host)
	defer cancel()
	var streams msb.Streams
	if x.stdin != nil {
		streams.Stdin = bytes.NewReader(x.stdin)
	}
	streams.Stdout = x.stdout
	return s.client.Exec(ctx, o, streams)
}

// checked is the seed's microsandboxChecked: any non-zero exit fails.
func (s *seed) checked(ctx context.Context, x seedExec) ([]byte, error) {
	res, err := s.exec(ctx, x)
	if err != nil {
		return nil, err
	}
	return res.Stdout, nil
}

// seedAgent is where the seed's create places the guest agent, and
// seedBuiltin the exec script that runs one of its builtins (its name, then
// the builtin's arguments).
const (
	seedAgent   = "/.oma-sandbox/agent"
	seedBuiltin = `exec ` + seedAgent + ` builtin "$@"`
)

// builtinArgs are seedBuiltin's arguments for builtin name.
func builtinArgs(name string, args []string) []string { return append([]string{name}, args...) }

// seedCreate is the seed's createMicrosandboxSandboxProvider: volume
// create, create, the mount preparation exec and the grep preflight exec;
// what was made is removed when a step fails.
func seedCreate(ctx context.Context, client *msb.Client, names session.Names, agent string) (*seed, error) {
	s := &seed{client: client, sandbox: names.Sandbox, volume: names.Volume}
	err := client.VolumeCreate(ctx, msb.VolumeCreateOptions{Name: names.Volume})
	if err != nil {
		return nil, err
	}
	err = client.Create(ctx, msb.CreateOptions{
		Image:     image,
		Name:      names.Sandbox,
		Mounts:    []msb.NamedMount{{Volume: names.Volume, Guest: seedWorkspace}},
		CopyFiles: []msb.CopyFile{{Src: agent, Dst: seedAgent}},
		Tmpfs: []msb.Tmpfs{
			{Path: "/mnt/session/uploads", Size: "64M", Options: []string{"nosuid", "nodev", "noexec"}},
			{Path: "/mnt/session/outputs", Size: "100M", Options: []string{"nosuid", "nodev", "noexec"}},
		},
		Workdir: seedWorkspace, NoNet: true, CPUs: 1, Memory: "1G", RootDisk: "1G",
		MaxDuration: "2h", Security: "restricted", Pull: "if-missing", Quiet: true,
		Labels: append(session.OwnerLabels(),
			msb.Label{Key: session.LabelWorkspaceID, Value: "bench"},
			msb.Label{Key: session.LabelSessionID, Value: "seed"},
			msb.Label{Key: session.LabelCreatedAt, Value: time.Now().UTC().Format(time.RFC3339)},
		),
	})
	if err == nil {
		_, err = s.checked(ctx, seedExec{
			script: `chown 0:0 "$1" && chmod 755 "$1" && chown 65534:65534 "$2" && chmod 700 "$2"`,
			args:   []string{"/mnt/session/uploads", "/mnt/session/outputs"},
			user:   "0",
		})
	}
	if err == nil {
		_, err = s.checked(ctx, seedExec{script: seedBuiltin, args: builtinArgs(agentwire.BuiltinGrepPreflight, []string{"."}), noGuest: true, host: seedAuxTimeout})
	}
	if err != nil {
		return nil, errors.Join(err, s.close(context.WithoutCancel(ctx)))
	}
	return s, nil
}

// close is the seed's dispose: remove --force, then volume remove.
func (s *seed) close(ctx context.Context) error {
	err := s.client.Remove(ctx, msb.RemoveOptions{Names: []string{s.sandbox}, Force: true})
	return errors.Join(err, s.client.VolumeRemove(ctx, s.volume))
}

// read: an access check exec, then a cat exec.
func (s *seed) read(ctx context.Context, abs string) (string, error) {
	if _, err := s.checked(ctx, seedExec{script: `test -r "$1" -a -f "$1"`, args: []string{abs}}); err != nil {
		return "", err
	}
	out, err := s.checked(ctx, seedExec{script: `cat "$1"`, args: []string{abs}})
	return string(out), err
}

// write: a mkdir exec for the parent, then a cat exec fed the content.
func (s *seed) write(ctx context.Context, abs, content string) error {
	if _, err := s.checked(ctx, seedExec{script: `mkdir -p "$1"`, args: []string{path.Dir(abs)}}); err != nil {
		return err
	}
	_, err := s.checked(ctx, seedExec{script: `cat > "$1"`, args: []string{abs}, stdin: []byte(content)})
	return err
}

// edit: an access check exec, a cat exec, then a cat exec writing back.
func (s *seed) edit(ctx context.Context, abs, oldText, newText string) error {
	if _, err := s.checked(ctx, seedExec{script: `test -r "$1" -a -w "$1" -a -f "$1"`, args: []string{abs}}); err != nil {
		return err
	}
	out, err := s.checked(ctx, seedExec{script: `cat "$1"`, args: []string{abs}})
	if err != nil {
		return err
	}
	if strings.Count(string(out), oldText) != 1 {
		return fmt.Errorf("seed edit: %q does not occur exactly once in %s", oldText, abs)
	}
	updated := strings.Replace(string(out), oldText, newText, 1)
	_, err = s.checked(ctx, seedExec{script: `cat > "$1"`, args: []string{abs}, stdin: []byte(updated)})
	return err
}

// ls: an exists exec, a stat exec, then a readdir exec.
func (s *seed) ls(ctx context.Context, abs string) ([]string, error) {
	res, err := s.exec(ctx, seedExec{script: `test -e "$1"`, args: []string{abs}})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("seed ls: %s does not exist", abs)
	}
	kind, err := s.checked(ctx, seedExec{
		script: `if [ -d "$1" ]; then printf directory; elif [ -e "$1" ]; then printf file; else exit 1; fi`,
		args:   []string{abs},
	})
	if err != nil {
		return nil, err
	}
	if string(kind) != "directory" {
		return nil, fmt.Errorf("seed ls: %s is not a directory", abs)
	}
	out, err := s.checked(ctx, seedExec{script: `ls -1A "$1"`, args: []string{abs}})
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// collector reads a search's stream after the marker: glob.Collector or
// grep.Collector.
type collector interface {
	Push(chunk []byte) error
	LimitReached() bool
	Matches() []string
	Finish() error
}

// search streams a readiness-marked search through one exec, then always
// runs its cleanup exec, as the seed's glob and grep do.
func (s *seed) search(ctx context.Context, script, cleanup string, args, cleanupArgs []string,
	ready *glob.ReadinessFilter, c collector) ([]string, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var streamErr error
	_, err := s.exec(runCtx, seedExec{script: script, args: args, noGuest: true, stdout: func(chunk []byte) {
		if streamErr != nil || c.LimitReached() {
			return
		}
		rest, err := ready.Push(chunk)
		if err == nil {
			err = c.Push(rest)
		}
		if err != nil || c.LimitReached() {
			streamErr = err
			cancel()
		}
	}})
	if _, cerr := s.checked(context.WithoutCancel(ctx), seedExec{script: cleanup, args: cleanupArgs, noGuest: true, host: seedAuxTimeout}); cerr != nil {
		return nil, cerr
	}
	switch {
	case streamErr != nil:
		return nil, streamErr
	case c.LimitReached():
		return c.Matches(), nil
	case err != nil:
		return nil, err
	}
	if err := ready.Finish(); err != nil {
		return nil, err
	}
	return c.Matches(), c.Finish()
}

func (s *seed) glob(ctx context.Context, root, pattern string) ([]string, error) {
	p, err := glob.Compile(pattern)
	if err != nil {
		return nil, err
	}
	c, err := glob.NewCollector(glob.EnumerationProtocol, glob.CollectorOptions{Root: root, Match: p.Match})
	if err != nil {
		return nil, err
	}
	token := glob.NewToken("glob")
	args := builtinArgs(agentwire.BuiltinGlobEnumerate, glob.EnumerationArgs(root, token, glob.Narrowing{}))
	cleanupArgs := builtinArgs(agentwire.BuiltinSearchKill, glob.CleanupArgs(glob.OwnerEnv, token))
	return s.search(ctx, seedBuiltin, seedBuiltin, args, cleanupArgs, glob.NewReadinessFilter(glob.EnumerationProtocol), c)
}

func (s *seed) grep(ctx context.Context, root, pattern string) ([]string, error) {
	c, err := grep.NewCollector(grep.CollectorOptions{Root: root})
	if err != nil {
		return nil, err
	}
	token := grep.NewToken()
	args := builtinArgs(agentwire.BuiltinGrepSearch, grep.SearchArgs(root, token, pattern, ""))
	cleanupArgs := builtinArgs(agentwire.BuiltinSearchKill, grep.CleanupArgs(token))
	return s.search(ctx, seedBuiltin, seedBuiltin, args, cleanupArgs, grep.NewReadinessFilter(), c)
}

// bash: one streaming exec of the sentinel protocol, without msb's
// --timeout (the guest timer is the script's own).
func (s *seed) bash(ctx context.Context, command string) (string, error) {
	call := bashproto.NewCall()
	args, stdin := bashproto.Args(call, command, seedOpTimeout, bashproto.LogsIn(seedWorkspace),
		bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	script, args := seedBuiltin, builtinArgs(agentwire.BuiltinBashSupervisor, args)
	var out bytes.Buffer
	f := bashproto.NewFilter(call.Secret, func(p []byte) { out.Write(p) })
	res, err := s.exec(ctx, seedExec{script: script, args: args, stdin: stdin, noGuest: true,
		stdout: func(p []byte) { _, _ = f.Write(p) }})
	_ = f.Close()
	if err != nil && res == nil {
		return "", err
	}
	if verr := f.Verdict(res.ExitCode); verr != nil {
		return "", verr
	}
	return out.String(), nil
}

// reap is the seed's reapMicrosandboxSandboxes, step for step and
// sequential: list, inspect each sandbox, remove each stale one, volume
// list, volume inspect each volume of ours, remove each stale one. The seed
// parses `volume inspect` as JSON, which msb does not print, so against msb
// it never removes a volume; the replay takes the age from the volume
// listing instead, so that it does the whole job ours does.
func (s *seed) reap(ctx context.Context, olderThan time.Duration, now time.Time) (removed int, err error) {
	sandboxes, err := s.client.List(ctx, msb.ListOptions{Labels: session.OwnerLabels()})
	if err != nil {
		return 0, err
	}
	attached := map[string]bool{}
	var stale []string
	for _, sb := range sandboxes {
		info, err := s.client.Inspect(ctx, sb.Name)
		if err != nil {
			continue
		}
		if now.Sub(info.CreatedAt) >= olderThan {
			stale = append(stale, sb.Name)
			continue
		}
		for _, m := range info.Mounts {
			attached[m.Name] = true
		}
	}
	for _, name := range stale {
		if s.client.Remove(ctx, msb.RemoveOptions{Names: []string{name}, Force: true}) == nil {
			removed++
		}
	}
	volumes, err := s.client.VolumeList(ctx)
	if err != nil {
		return removed, err
	}
	var staleVolumes []string
	for _, v := range volumes {
		if _, ours := session.VolumeStem(session.DefaultPrefix, v.Name); !ours || attached[v.Name] {
			continue
		}
		if _, err := s.client.VolumeInspect(ctx, v.Name); err != nil {
			continue
		}
		if now.Sub(v.CreatedAt) >= olderThan {
			staleVolumes = append(staleVolumes, v.Name)
		}
	}
	for _, name := range staleVolumes {
		if s.client.VolumeRemove(ctx, name) == nil {
			removed++
		}
	}
	return removed, nil
}

// seedNames are fresh resource names for a seed-created session.
func seedNames() session.Names {
	return session.NewNames("seed", "bench", "s"+strconv.FormatInt(sessionSeq.Add(1), 10), time.Now(), uint64(time.Now().UnixNano()))
}

// recordingRunner notes each msb invocation's subcommand ("exec",
// "volume create", ...) as it starts.
type recordingRunner struct {
	inner msb.Runner
	mu    sync.Mutex
	calls []string
}

func (r *recordingRunner) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	name := c.Args[0]
	if name == "volume" && len(c.Args) > 1 {
		name += " " + c.Args[1]
	}
	r.mu.Lock()
	r.calls = append(r.calls, name)
	r.mu.Unlock()
	return r.inner.Run(ctx, c)
}

// take returns the invocations since the last take.
func (r *recordingRunner) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// TestSeedReplayCalls pins the replay to the seed's msb sequences
// (open-managed-agents 0.1.0, microsandbox.js), so that the side-by-side
// benchmarks compare against what the seed really costs: a replay that
// drops or adds an invocation fails here, in every `go test` run.
func TestSeedReplayCalls(t *testing.T) {
	requireFakemsb(t)
	env := fakemsbtest.New(t)
	rec := &recordingRunner{inner: &msb.CLI{Path: env.Bin}}
	client := msb.NewClient(rec)
	ctx := context.Background()
	execs := func(n int) []string { return slices.Repeat([]string{"exec"}, n) }

	sd, err := seedCreate(ctx, client, seedNames(), agenttest.AgentBinary(t))
	require.NoError(t, err)
	// volume create, create, the mounts' preparation, the grep preflight.
	assert.Equal(t, []string{"volume create", "create", "exec", "exec"}, rec.take(), "create")

	require.NoError(t, sd.write(ctx, "/workspace/d/f.txt", "alpha\nneedle\n"))
	assert.Equal(t, execs(2), rec.take(), "write: mkdir, then cat fed the content")
	got, err := sd.read(ctx, "/workspace/d/f.txt")
	require.NoError(t, err)
	assert.Equal(t, "alpha\nneedle\n", got)
	assert.Equal(t, execs(2), rec.take(), "read: access check, then cat")
	require.NoError(t, sd.edit(ctx, "/workspace/d/f.txt", "alpha", "beta"))
	assert.Equal(t, execs(3), rec.take(), "edit: access check, cat, cat writing back")
	names, err := sd.ls(ctx, "/workspace/d")
	require.NoError(t, err)
	assert.Equal(t, []string{"f.txt"}, names)
	assert.Equal(t, execs(3), rec.take(), "ls: exists, stat, readdir")
	matches, err := sd.glob(ctx, "/workspace", "**/*.txt")
	require.NoError(t, err)
	assert.Len(t, matches, 1)
	assert.Equal(t, execs(2), rec.take(), "glob: the search, then its cleanup")
	matches, err = sd.grep(ctx, "/workspace", "needle")
	require.NoError(t, err)
	assert.Len(t, matches, 1)
	assert.Equal(t, execs(2), rec.take(), "grep: the search, then its cleanup")
	out, err := sd.bash(ctx, "echo hi")
	require.NoError(t, err)
	assert.Equal(t, "hi\n", out)
	assert.Equal(t, execs(1), rec.take(), "bash: one streaming exec")

	require.NoError(t, sd.close(ctx))
	assert.Equal(t, []string{"remove", "volume remove"}, rec.take(), "close")

	// A sweep over one stale session: list, inspect it, remove it, list
	// volumes, inspect ours, remove the stale one.
	stale, err := createSession(ctx, client)
	require.NoError(t, err)
	rec.take()
	removed, err := (&seed{client: client}).reap(ctx, time.Nanosecond, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 2, removed)
	assert.Equal(t, []string{"list", "inspect", "remove", "volume list", "volume inspect", "volume remove"}, rec.take(), "reap")
	assert.Empty(t, env.Sandboxes(t), "the sweep removed %s", stale.Name())
	assert.Empty(t, env.Volumes(t))
}
