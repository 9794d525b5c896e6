//go:build linux

package guestagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/grep"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// The agent spells the tags itself (it does not import glob or grep).
func TestSearchOwnerEnvs(t *testing.T) {
	if globOwnerEnv != glob.OwnerEnv || grepOwnerEnv != grep.OwnerEnv {
		t.Fatalf("the agent tags %s and %s, the tools %s and %s", globOwnerEnv, grepOwnerEnv, glob.OwnerEnv, grep.OwnerEnv)
	}
}

// Arguments not the builtin's count are refused, naming what was wrong.
func TestSearchBuiltinsArgs(t *testing.T) {
	for name, fn := range map[string]builtin{agentwire.BuiltinGlobEnumerate: globEnumerate, agentwire.BuiltinGrepSearch: grepSearch} {
		var stdout, stderr bytes.Buffer
		c := &builtinCall{Args: []string{"token", "/"}, Stdout: &stdout, Stderr: &stderr}
		if code := fn(c); code != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), name+": 2 arguments, want ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, stdout.String(), stderr.String())
		}
	}
}

func needSearchTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"find", "rg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// outcome is what one run of a builtin gave.
type outcome struct {
	stdout, stderr string
	code           int
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d\nstdout %q\nstderr %q", o.code, o.stdout, o.stderr)
}

func runOutcome(t *testing.T, cmd *exec.Cmd, dir string, cred *syscall.Credential) outcome {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(10*time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	err := cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return outcome{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// searchUser is a user the search tests run the builtins as.
type searchUser struct {
	name string
	cred *syscall.Credential
}

// searchUsers are root and nobody when the tests run as root, else the
// test's own user.
func searchUsers() []searchUser {
	if os.Geteuid() != 0 {
		return []searchUser{{"self", nil}}
	}
	return []searchUser{{"root", nil}, {"nobody", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}}
}

// searchFixture builds, in a directory every user can reach, a tree with
// hidden, ignored-looking, binary, deep and oddly named files, an
// unreadable subdirectory, and roots of every kind beside it.
func searchFixture(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: nobody must be able to reach it.
	base, err := os.MkdirTemp("", "oma-search-parity-")
	if err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(base, "tree", "locked")
	t.Cleanup(func() {
		_ = os.Chmod(locked, 0o755)
		_ = os.Chmod(filepath.Join(base, "private"), 0o755)
		_ = os.RemoveAll(base)
	})
	files := map[string]string{
		"tree/a.txt":                "needle\n",
		"tree/b.go":                 "needle\nneedle\n",
		"tree/none.txt":             "other\n",
		"tree/.hidden":              "needle\n",
		"tree/.gitignore":           "a.txt\n",
		"tree/bin.dat":              "needle\x00\n",
		"tree/sp ace/new\nline.txt": "needle\n",
		"tree/src/pkg/deep/x.go":    "needle\n",
		"tree/src/pkg/y.txt":        "needle\n",
		"tree/.git/config":          "needle\n",
		"tree/locked/in.txt":        "needle\n",
		"private/inner/f.txt":       "needle\n",
		"file.txt":                  "needle\n",
		"nul.txt":                   "needle\x00tail\n",
		"unreadable.txt":            "needle\n",
		"empty/":                    "",
	}
	for name, body := range files {
		p := filepath.Join(base, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []error{
		os.Chmod(base, 0o755),
		os.Symlink("nul.txt", filepath.Join(base, "nullink")),
		os.Symlink("tree", filepath.Join(base, "treelink")),
		syscall.Mkfifo(filepath.Join(base, "fifo"), 0o666),
		os.Chmod(filepath.Join(base, "unreadable.txt"), 0),
		os.Chmod(locked, 0),
		os.Chmod(filepath.Join(base, "private"), 0o700),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return base
}

// checkBuiltin runs builtin name on args in dir as each user, and fails
// when check finds fault with its outcome.
func checkBuiltin(t *testing.T, name string, args []string, dir string, check func(o outcome, user string) error) {
	t.Helper()
	agent := agenttest.AgentBinary(t)
	for _, u := range searchUsers() {
		got := runOutcome(t, exec.Command(agent, append([]string{"builtin", name}, args...)...), dir, u.cred)
		if err := check(got, u.name); err != nil {
			t.Errorf("as %s: %v\n%v", u.name, err, got)
		}
	}
}

// wants returns a check that the status is code (nobodyCode as nobody)
// and that stdout holds each of holds.
func wants(code, nobodyCode int, holds ...string) func(outcome, string) error {
	return func(o outcome, user string) error {
		want := code
		if user == "nobody" {
			want = nobodyCode
		}
		if o.code != want {
			return fmt.Errorf("status %d, want %d", o.code, want)
		}
		for _, h := range holds {
			if !strings.Contains(o.stdout, h) {
				return fmt.Errorf("stdout lacks %q", h)
			}
		}
		return nil
	}
}

func TestGlobEnumerate(t *testing.T) {
	needSearchTools(t)
	base := searchFixture(t)
	tree := filepath.Join(base, "tree")
	for _, tc := range []struct {
		name  string
		root  string
		n     glob.Narrowing
		check func(outcome, string) error
	}{
		{name: "tree", root: tree, check: wants(0, 0, "./a.txt\x00", "./sp ace/new\nline.txt\x00", "./.git/config\x00")},
		{name: "skipgit", root: tree, n: glob.Narrowing{SkipGit: true}, check: wants(0, 0, "./b.go\x00")},
		{name: "name", root: tree, n: glob.Narrowing{Name: "*.go"}, check: wants(0, 0, "./src/pkg/deep/x.go\x00")},
		{name: "under", root: tree, n: glob.Narrowing{Under: "src/pkg"}, check: wants(0, 0, "./src/pkg/deep/x.go\x00")},
		{name: "all narrowings", root: tree, n: glob.Narrowing{SkipGit: true, Name: "*.go", Under: "pkg"}, check: wants(0, 0, "./src/pkg/deep/x.go\x00")},
		{name: "relative root", root: "tree", check: wants(0, 0, "./b.go\x00")},
		{name: "root through a symlink", root: "treelink", check: wants(0, 0, "./b.go\x00")},
		{name: "root with dot-dot", root: "tree/src/..", check: wants(0, 0, "./b.go\x00")},
		{name: "empty directory", root: filepath.Join(base, "empty"), check: wants(0, 0)},
		{name: "missing root", root: filepath.Join(base, "missing"), check: wants(3, 3, glob.ReadyMarker+"\x00")},
		{name: "file root", root: filepath.Join(base, "file.txt"), check: wants(3, 3)},
		{name: "fifo root", root: filepath.Join(base, "fifo"), check: wants(3, 3)},
		{name: "root not enterable", root: filepath.Join(base, "private", "inner"), check: wants(0, 3)},
		{name: "locked subdirectory", root: filepath.Join(tree, "locked"), check: wants(0, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkBuiltin(t, agentwire.BuiltinGlobEnumerate, glob.EnumerationArgs(tc.root, glob.NewToken("glob"), tc.n), base, tc.check)
		})
	}
}

func TestGrepSearch(t *testing.T) {
	needSearchTools(t)
	base := searchFixture(t)
	tree := filepath.Join(base, "tree")
	missing := filepath.Join(base, "missing")
	marker := grep.ReadyMarker + "\x00"
	for _, tc := range []struct {
		name, root, pattern, glob string
		check                     func(outcome, string) error
	}{
		{name: "matches", root: tree, pattern: "needle", check: wants(0, 0, marker, tree+"/b.go\x002\n", tree+"/sp ace/new\nline.txt\x001\n")},
		{name: "no match", root: tree, pattern: "absent", check: wants(0, 0, marker)},
		{name: "invalid regex", root: tree, pattern: "[", check: wants(2, 2, marker)},
		{name: "missing root", root: missing, pattern: "needle", check: wants(2, 2, marker)},
		{name: "missing root, invalid regex", root: missing, pattern: "[", check: wants(2, 2, marker)},
		{name: "file root", root: filepath.Join(base, "file.txt"), pattern: "needle", check: wants(0, 0, marker+base+"/file.txt\x00")},
		{name: "file root holding a NUL", root: filepath.Join(base, "nul.txt"), pattern: "needle", check: wants(0, 0, marker)},
		{name: "link to a file holding a NUL", root: filepath.Join(base, "nullink"), pattern: "needle", check: wants(0, 0, marker)},
		{name: "unreadable file root", root: filepath.Join(base, "unreadable.txt"), pattern: "needle", check: wants(0, 0, marker)},
		{name: "root not enterable", root: filepath.Join(base, "private", "inner"), pattern: "needle", check: wants(0, 2, marker)},
		{name: "glob filter", root: tree, pattern: "needle", glob: glob.ToRipgrep("*.go"), check: wants(0, 0, tree+"/src/pkg/deep/x.go\x00")},
		{name: "relative root", root: "tree", pattern: "needle", check: wants(0, 0, "tree/b.go\x00")},
		{name: "relative file root holding a NUL", root: "nul.txt", pattern: "needle", check: wants(0, 0, marker)},
		{name: "relative glob", root: "tree", pattern: "needle", glob: "tree/src/**", check: wants(0, 0, "tree/src/pkg/y.txt\x00")},
		{name: "pattern like a flag", root: tree, pattern: "--files", check: wants(0, 0, marker)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkBuiltin(t, agentwire.BuiltinGrepSearch, grep.SearchArgs(tc.root, grep.NewToken(), tc.pattern, tc.glob), base, tc.check)
		})
	}
}

// procEntry is a process found by its tag.
type procEntry struct {
	pid, sid int
	uid      string
	comm     string
}

// taggedProcs lists the live processes whose environment holds entry.
func taggedProcs(entry string) []procEntry {
	var found []procEntry
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+entry+"\x00")) {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if f[0] == "Z" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		sid, _ := strconv.Atoi(f[3])
		comm, _ := os.ReadFile(d + "/comm")
		status, _ := os.ReadFile(d + "/status")
		uid := ""
		for line := range strings.SplitSeq(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				uid = strings.Fields(rest)[0]
			}
		}
		found = append(found, procEntry{pid, sid, uid, strings.TrimSpace(string(comm))})
	}
	return found
}

// probeWriter looks, when the marker is written, for the call's tagged
// processes.
type probeWriter struct {
	entry, marker string
	seen          []procEntry
	marked        bool
}

func (w *probeWriter) Write(b []byte) (int, error) {
	if !w.marked && bytes.HasPrefix(b, []byte(w.marker)) {
		w.marked = true
		w.seen = taggedProcs(w.entry)
	}
	return len(b), nil
}

// grep-search sends its marker only once rg, tagged and leading its own
// session, exists: work after readiness is always the tagged work the
// host's cleanup finds. On the call's end it kills rg, here blocked on a
// FIFO root, and returns.
func TestGrepSearchReadyOnceRgRuns(t *testing.T) {
	needSearchTools(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	token := grep.NewToken()
	entry := grep.OwnerEnv + "=" + token
	out := &probeWriter{entry: entry, marker: grep.ReadyMarker + "\x00"}
	killed := make(chan struct{})
	c := &builtinCall{
		Args: []string{token, fifo, "needle", "", grep.ReadyMarker}, Stdin: eofReader{},
		Stdout: out, Stderr: &bytes.Buffer{},
		User: identity{uint32(os.Geteuid()), uint32(os.Getegid())}, Workdir: dir, Env: os.Environ(), Killed: killed,
	}
	done := make(chan int, 1)
	go func() { done <- grepSearch(c) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case code := <-done:
		t.Fatalf("a search of a FIFO returned %d before it was killed", code)
	default:
	}
	close(killed)
	select {
	case code := <-done:
		if code != killedStatus {
			t.Errorf("killed search returned %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a killed search did not return")
	}
	if len(out.seen) != 1 || out.seen[0].comm != "rg" || out.seen[0].sid != out.seen[0].pid {
		t.Fatalf("at the marker, the processes tagged %s were %+v; want one rg leading its session", entry, out.seen)
	}
	if left := taggedProcs(entry); len(left) > 0 {
		t.Fatalf("left running: %+v", left)
	}
}

// A search's processes run as the call's user, tagged, each leading its
// own session; a kill frame and the guest timer kill them and the call
// answers. grep's rg blocks on a FIFO root; glob's find is made to hang
// (a FIFO root fails glob at once, as it would fail a cd).
func TestSearchBuiltinsEnd(t *testing.T) {
	needSearchTools(t)
	// Not t.TempDir: nobody must be able to reach it.
	dir, err := os.MkdirTemp("", "oma-search-end-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "find"), []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	user, uid := "", strconv.Itoa(os.Geteuid())
	if os.Geteuid() == 0 {
		user, uid = "65534", "65534"
	}
	for _, tc := range []struct {
		name, builtin, env string
		args               func(token string) []string
		comm               string
	}{
		{"grep", agentwire.BuiltinGrepSearch, grep.OwnerEnv, func(token string) []string {
			return []string{token, fifo, "needle", "", grep.ReadyMarker}
		}, "rg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
			killToken, timerToken := "oma-test-kill-"+tc.name, "oma-test-timer-"+tc.name
			line := func(id int, token string, timeoutMS int64) string {
				run := &agentwire.Run{ID: uint64(id), Builtin: tc.builtin, MaxOutput: 1 << 20, TimeoutMS: timeoutMS, User: user, Workdir: dir}
				for _, a := range tc.args(token) {
					run.Args = append(run.Args, []byte(a))
				}
				b, err := agentwire.Append(nil, run)
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSuffix(string(b), "\n")
			}
			// Watch for the processes while the calls run, until both have
			// executed the command (a stub's own process has its name
			// first).
			ctx, stop := context.WithCancel(context.Background())
			seen := make(chan []procEntry, 1)
			started := func(all []procEntry) bool {
				return len(all) == 2 && all[0].comm == tc.comm && all[1].comm == tc.comm
			}
			go func() {
				var all []procEntry
				for ctx.Err() == nil && !started(all) {
					all = nil
					for _, token := range []string{killToken, timerToken} {
						all = append(all, taggedProcs(tc.env+"="+token)...)
					}
					time.Sleep(20 * time.Millisecond)
				}
				seen <- all
			}()
			err, frames := serveHost(t, line(1, killToken, 0), line(2, timerToken, 400), pause, `{"type":"kill","id":1}`, pause)
			stop()
			if err != nil {
				t.Fatal(err)
			}
			_, exits := collect(frames)
			if e := exits[1]; e == nil || e.TimedOut || e.Error != "" {
				t.Errorf("killed call: %+v", e)
			}
			if e := exits[2]; e == nil || !e.TimedOut || e.Error != "" {
				t.Errorf("timed-out call: %+v", e)
			}
			procs := <-seen
			if len(procs) != 2 {
				t.Fatalf("tagged processes seen while the calls ran: %+v", procs)
			}
			for _, p := range procs {
				if p.comm != tc.comm || p.sid != p.pid || p.uid != uid {
					t.Errorf("process %+v: want %s, leading its session, as uid %s", p, tc.comm, uid)
				}
			}
			for _, token := range []string{killToken, timerToken} {
				if left := taggedProcs(tc.env + "=" + token); len(left) > 0 {
					t.Errorf("left running: %+v", left)
				}
			}
		})
	}
}

// Through the agent, a search builtin answers even in a workdir its user
// cannot search: the agent enters it as root.
func TestSearchBuiltinsInALockedWorkdir(t *testing.T) {
	needSearchTools(t)
	if os.Geteuid() != 0 {
		t.Skip("running a call as another user needs root")
	}
	base := searchFixture(t)
	tree, locked := filepath.Join(base, "tree"), filepath.Join(base, "private")
	line := func(id int, builtin string, args []string) string {
		run := &agentwire.Run{ID: uint64(id), Builtin: builtin, MaxOutput: 1 << 20, Workdir: locked}
		for _, a := range args {
			run.Args = append(run.Args, []byte(a))
		}
		b, err := agentwire.Append(nil, run)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	err, frames := serveHostWith(t, &Server{DefaultUser: "65534"},
		line(1, agentwire.BuiltinGlobEnumerate, glob.EnumerationArgs(tree, glob.NewToken("glob"), glob.Narrowing{})),
		line(2, agentwire.BuiltinGrepSearch, grep.SearchArgs(tree, grep.NewToken(), "needle", "")))
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*outcome{}
	for _, f := range frames {
		switch f := f.(type) {
		case *agentwire.Out:
			if got[f.ID] == nil {
				got[f.ID] = &outcome{}
			}
			if f.FD == 1 {
				got[f.ID].stdout += string(f.Data)
			} else {
				got[f.ID].stderr += string(f.Data)
			}
		case *agentwire.Exit:
			if f.Error != "" {
				t.Fatalf("call %d: %s", f.ID, f.Error)
			}
			if got[f.ID] == nil {
				got[f.ID] = &outcome{}
			}
			got[f.ID].code = f.Code
		}
	}
	for id, marker := range map[uint64]string{1: glob.ReadyMarker, 2: grep.ReadyMarker} {
		o := got[id]
		if o == nil || o.code != 0 || !strings.HasPrefix(o.stdout, marker+"\x00") || !strings.Contains(o.stdout, "a.txt\x00") {
			t.Errorf("call %d gave %v", id, o)
		}
	}
}

// glob needs no find: the agent walks the tree itself, with the same
// listing whatever PATH holds.
func TestGlobEnumerateNeedsNoFind(t *testing.T) {
	needSearchTools(t)
	base := searchFixture(t)
	bin := filepath.Join(base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	args := glob.EnumerationArgs(filepath.Join(base, "tree"), glob.NewToken("glob"), glob.Narrowing{})
	for _, u := range searchUsers() {
		b := exec.Command(agenttest.AgentBinary(t), append([]string{"builtin", agentwire.BuiltinGlobEnumerate}, args...)...)
		b.Env = append(os.Environ(), "PATH="+bin)
		got := runOutcome(t, b, base, u.cred)
		if got.code != 0 || !strings.HasPrefix(got.stdout, glob.ReadyMarker+"\x00") || !strings.Contains(got.stdout, "\x00./b.go\x00") {
			t.Errorf("as %s: the builtin gave\n%v", u.name, got)
		}
	}
}

// The listing holds the regular files under root, hidden and oddly named
// ones too, as "./"-relative paths after the marker: no FIFO (which is
// never opened), and nothing behind a symbolic link, to a directory or a
// file, outside root.
func TestGlobEnumerateListsOnlyRegularFilesInside(t *testing.T) {
	needSearchTools(t)
	root, outside := t.TempDir(), t.TempDir()
	for _, f := range []string{"a.md", ".env", "sub/b.md", "sub/deep/c.txt", "node_modules/x/y.js", "sp ace/new\nline", outside + "/secret"} {
		if !filepath.IsAbs(f) {
			f = filepath.Join(root, f)
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		os.Symlink(outside, filepath.Join(root, "link")),
		os.Symlink(outside+"/secret", filepath.Join(root, "filelink")),
		syscall.Mkfifo(filepath.Join(root, "sub", "fifo"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(agenttest.AgentBinary(t), append([]string{"builtin", agentwire.BuiltinGlobEnumerate}, glob.EnumerationArgs(root, glob.NewToken("glob"), glob.Narrowing{})...)...)
	o := runOutcome(t, cmd, root, nil)
	if o.code != 0 || o.stderr != "" {
		t.Fatalf("the builtin gave\n%v", o)
	}
	rest, ok := strings.CutPrefix(o.stdout, glob.ReadyMarker+"\x00")
	if !ok || !strings.HasSuffix(rest, "\x00") {
		t.Fatalf("output shape %q", o.stdout)
	}
	got := strings.Split(strings.TrimSuffix(rest, "\x00"), "\x00")
	slices.Sort(got)
	want := []string{"./.env", "./a.md", "./node_modules/x/y.js", "./sp ace/new\nline", "./sub/b.md", "./sub/deep/c.txt"}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
}

// A directory the user cannot read is named on stderr, as find names it,
// and the walk goes on: status 0. A kill before the walk ends it with a
// killed call's status and nothing listed.
func TestGlobEnumerateUnreadableAndKilled(t *testing.T) {
	// Not t.TempDir: nobody must be able to reach it.
	root, err := os.MkdirTemp("", "oma-glob-unreadable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for _, d := range []string{"a/locked", "b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/locked/hidden.txt", "b/seen.txt"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "a/locked"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	args := glob.EnumerationArgs(root, glob.NewToken("glob"), glob.Narrowing{})
	cmd := exec.Command(agenttest.AgentBinary(t), append([]string{"builtin", agentwire.BuiltinGlobEnumerate}, args...)...)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	want := outcome{code: 0, stdout: glob.ReadyMarker + "\x00./b/seen.txt\x00", stderr: "find: './a/locked': Permission denied\n"}
	if got := runOutcome(t, cmd, root, cred); got != want {
		t.Errorf("the builtin gave\n%v\nwant\n%v", got, want)
	}

	killed := make(chan struct{})
	close(killed)
	var out, errb bytes.Buffer
	code, err := runBuiltin(agentwire.BuiltinGlobEnumerate, args, strings.NewReader(""), &out, &errb, killed)
	if err != nil || code != killedStatus || out.Len() != 0 {
		t.Errorf("killed: status %d, %v, stdout %q", code, err, out.String())
	}
}
