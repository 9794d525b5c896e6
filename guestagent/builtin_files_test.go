//go:build linux

package guestagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// start sends a run frame for builtin name as nobody.
func (h *agentHost) start(id uint64, name string, stdin bool, args ...string) {
	h.t.Helper()
	run := &agentwire.Run{ID: id, Builtin: name, MaxOutput: 1 << 20, Stdin: stdin, User: "65534:65534"}
	for _, a := range args {
		run.Args = append(run.Args, []byte(a))
	}
	h.send(run)
}

func (h *agentHost) stdin(id uint64, data string) {
	h.t.Helper()
	if data != "" {
		h.send(&agentwire.Stdin{ID: id, Data: []byte(data)})
	}
}

// waitTagged gives call id's exit and its output, each chunk after its
// fd ("1:", "2:"), failing the test when none comes within 5 s: a builtin
// must never block the agent.
func (h *agentHost) waitTagged(id uint64) (*agentwire.Exit, string) {
	h.t.Helper()
	exit := h.waitFor(id, 5*time.Second)
	return exit, h.tagged[id]
}

// call runs builtin name as nobody with stdin and waits for it.
func (h *agentHost) call(id uint64, name, stdin string, args ...string) (int, string) {
	h.t.Helper()
	h.start(id, name, true, args...)
	h.stdin(id, stdin)
	h.send(&agentwire.EOF{ID: id})
	exit, out := h.waitTagged(id)
	return exit.Code, out
}

// nobodyTree makes a workspace nobody owns under a directory nobody can
// reach (t.TempDir's parent is not), and a root-owned directory beside it.
func nobodyTree(t *testing.T) (ws, rootDir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent acts as another user only when it is root")
	}
	base, err := os.MkdirTemp("", "filebuiltin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	ws, rootDir = filepath.Join(base, "ws"), filepath.Join(base, "root")
	must(t, os.Chmod(base, 0o755))
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.Chown(ws, 65534, 65534))
	must(t, os.Mkdir(rootDir, 0o755))
	return ws, rootDir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func owner(t *testing.T, path string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	must(t, err)
	sys := st.Sys().(*syscall.Stat_t)
	return sys.Uid, sys.Gid, st.Mode()
}

// The file builtins act as the call's user, never as the agent's root: a
// file or directory only root may read or write stays out of reach, what
// they make is the user's, and a replaced file of another user's keeps its
// mode and becomes the user's.
func TestFileBuiltinsActAsUser(t *testing.T) {
	ws, rootDir := nobodyTree(t)
	private := filepath.Join(ws, "private")
	must(t, os.Mkdir(private, 0o700))
	must(t, os.WriteFile(filepath.Join(private, "f"), []byte("root's\n"), 0o644))
	must(t, os.Mkdir(filepath.Join(ws, "rootdir"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "secret"), []byte("root's\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(ws, "shared"), []byte("root's\n"), 0o640))
	must(t, os.Symlink(rootDir, filepath.Join(ws, "rootlink")))
	h := startAgentHost(t, "/")
	for i, tc := range []struct {
		name, builtin, path, old, stdin string
		code                            int
		out                             string
	}{
		{"cat root's 0600 file", agentwire.BuiltinCat, "secret", "", "", 3, "2:Cannot read shown: Permission denied\n"},
		{"cat in an unsearchable directory", agentwire.BuiltinCat, "private/f", "", "", 3, "2:File not found: shown\n"},
		{"write in an unsearchable directory", agentwire.BuiltinWrite, "private/f", "", "x", 3, "2:Cannot write shown: Permission denied\n"},
		{"write in root's directory", agentwire.BuiltinWrite, "rootdir/x/y", "", "x", 3, "2:Cannot create the directory of shown: Permission denied\n"},
		{"edit root's 0600 file", agentwire.BuiltinWrite, "secret", "7", "root's\nnew\n", 9, "2:file changed since it was read\n"},
		{"new file", agentwire.BuiltinWrite, "new/file", "", "new\n", 0, ""},
		{"root's file replaced", agentwire.BuiltinWrite, "shared", "", "mine\n", 0, ""},
		{"cat the new file", agentwire.BuiltinCat, "new/file", "", "", 0, "1:new\n"},
	} {
		args := []string{filepath.Join(ws, tc.path), ws, "shown"}
		if tc.builtin == agentwire.BuiltinWrite {
			args = []string{args[0], tc.old, ws, "shown"}
		}
		code, out := h.call(uint64(i+1), tc.builtin, tc.stdin, args...)
		if code != tc.code || out != tc.out {
			t.Errorf("%s: exit %d %q, want %d %q", tc.name, code, out, tc.code, tc.out)
		}
	}
	// Quoted as find quotes in this process's locale.
	if code, out := h.call(100, agentwire.BuiltinLs, "", private, "shown"); code != 1 || out != "2:find: "+findQuoter(os.Environ()).quote(private)+": Permission denied\n" {
		t.Errorf("ls root's 0700 directory: exit %d %q", code, out)
	}
	if uid, gid, mode := owner(t, filepath.Join(ws, "new", "file")); uid != 65534 || gid != 65534 || mode != 0o644 {
		t.Errorf("new file: %d:%d %v, want nobody's, 0644", uid, gid, mode)
	}
	if uid, _, mode := owner(t, filepath.Join(ws, "new")); uid != 65534 || !mode.IsDir() {
		t.Errorf("new directory: owner %d %v", uid, mode)
	}
	if uid, _, mode := owner(t, filepath.Join(ws, "shared")); uid != 65534 || mode != 0o640 {
		t.Errorf("replaced file: owner %d mode %v, want nobody's, 0640", uid, mode)
	}
	for _, dir := range []string{private, filepath.Join(ws, "rootdir"), rootDir} {
		entries, _ := os.ReadDir(dir)
		if len(entries) > 1 || (len(entries) == 1 && entries[0].Name() != "f") {
			t.Errorf("%s got %v", dir, entries)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "secret")); string(b) != "root's\n" {
		t.Errorf("root's file now holds %q", b)
	}
}

// A directory on the path swapped for a link to root's directory while an
// edit waits for its original bytes does not let the edit replace root's
// file: the temp file and the rename are the user's, refused there.
func TestWriteBuiltinDirectorySwapped(t *testing.T) {
	ws, rootDir := nobodyTree(t)
	dir := filepath.Join(ws, "d")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chown(dir, 65534, 65534))
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("same\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(rootDir, "f"), []byte("same\n"), 0o644))
	h := startAgentHost(t, "/")
	h.start(1, agentwire.BuiltinWrite, true, filepath.Join(dir, "f"), "5", ws, "shown")
	time.Sleep(100 * time.Millisecond) // the builtin has resolved the path
	must(t, os.Rename(dir, dir+".moved"))
	must(t, os.Symlink(rootDir, dir))
	h.stdin(1, "same\nroot's file replaced\n")
	h.send(&agentwire.EOF{ID: 1})
	exit, out := h.waitTagged(1)
	if exit.Code != 3 || out != "2:Cannot write shown: Permission denied\n" {
		t.Errorf("exit %d %q, want 3 and a refused temp file", exit.Code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(rootDir, "f")); string(b) != "same\n" {
		t.Errorf("root's file now holds %q", b)
	}
	if entries, _ := os.ReadDir(rootDir); len(entries) != 1 {
		t.Errorf("root's directory holds %v", entries)
	}
}

// A FIFO, named or behind a link, stalls neither the read before an edit
// nor the edit's check; a plain write replaces it.
func TestFileBuiltinsFIFO(t *testing.T) {
	ws, _ := nobodyTree(t)
	fifo := filepath.Join(ws, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o644))
	must(t, os.Lchown(fifo, 65534, 65534))
	must(t, os.Symlink("fifo", filepath.Join(ws, "link")))
	h := startAgentHost(t, "/")
	for i, tc := range []struct {
		builtin string
		args    []string
		stdin   string
		code    int
		out     string
	}{
		{agentwire.BuiltinCat, []string{fifo, ws, "shown"}, "", 3, "2:Not a regular file: shown\n"},
		{agentwire.BuiltinCat, []string{filepath.Join(ws, "link"), ws, "shown"}, "", 3, "2:Not a regular file: shown\n"},
		{agentwire.BuiltinWrite, []string{filepath.Join(ws, "link"), "3", ws, "shown"}, "abcnew\n", 9, "2:file changed since it was read\n"},
		{agentwire.BuiltinWrite, []string{filepath.Join(ws, "link"), "", ws, "shown"}, "new\n", 0, ""},
	} {
		code, out := h.call(uint64(i+1), tc.builtin, tc.stdin, tc.args...)
		if code != tc.code || out != tc.out {
			t.Errorf("%s %q: exit %d %q, want %d %q", tc.builtin, tc.args[0], code, out, tc.code, tc.out)
		}
	}
	if b, err := os.ReadFile(fifo); err != nil || string(b) != "new\n" {
		t.Errorf("the FIFO's name holds %q (%v)", b, err)
	}
}

// The edit's check is made under the file's flock, against the file the
// name holds once the lock is had: a writer that held the lock and renamed
// over the file meanwhile wins, and the edit writes nothing. A kill ends
// the wait for the lock and removes the temp file.
func TestWriteBuiltinLostUpdate(t *testing.T) {
	ws, _ := nobodyTree(t)
	file := filepath.Join(ws, "f")
	must(t, os.WriteFile(file, []byte("before\n"), 0o644))
	must(t, os.Chown(file, 65534, 65534))
	lockFile := func() int {
		fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		must(t, err)
		must(t, unix.Flock(fd, unix.LOCK_EX))
		return fd
	}
	h := startAgentHost(t, "/")

	held := lockFile()
	h.start(1, agentwire.BuiltinWrite, true, file, "7", ws, "shown")
	h.stdin(1, "before\nedited\n")
	h.send(&agentwire.EOF{ID: 1})
	time.Sleep(200 * time.Millisecond) // the edit waits for the lock
	must(t, os.WriteFile(file+".other", []byte("other\n"), 0o644))
	must(t, os.Rename(file+".other", file))
	unix.Close(held)
	if exit, out := h.waitTagged(1); exit.Code != 9 || out != "2:file changed since it was read\n" {
		t.Errorf("edit after another writer: exit %d %q", exit.Code, out)
	}
	if b, _ := os.ReadFile(file); string(b) != "other\n" {
		t.Errorf("the file holds %q, want the other writer's", b)
	}

	held = lockFile()
	defer unix.Close(held)
	h.start(2, agentwire.BuiltinWrite, true, file, "6", ws, "shown")
	h.stdin(2, "other\nedited\n")
	h.send(&agentwire.EOF{ID: 2})
	time.Sleep(200 * time.Millisecond)
	h.send(&agentwire.Kill{ID: 2})
	if exit, _ := h.waitTagged(2); exit.Code != killedExit {
		t.Errorf("killed edit: exit %d", exit.Code)
	}
	entries, _ := os.ReadDir(ws)
	if len(entries) != 1 {
		t.Errorf("the workspace holds %v after the kill", entries)
	}
	if b, _ := os.ReadFile(file); string(b) != "other\n" {
		t.Errorf("the file holds %q after the kill", b)
	}
}

// A write waiting for stdin ends at its kill, leaving nothing behind.
func TestWriteBuiltinKilledWaitingForStdin(t *testing.T) {
	dir := t.TempDir()
	h := startAgentHost(t, "/")
	h.send(&agentwire.Run{ID: 1, Builtin: agentwire.BuiltinWrite, MaxOutput: 1 << 20, Stdin: true,
		Args: [][]byte{[]byte(dir + "/f"), nil, []byte(dir), []byte("shown")}})
	h.stdin(1, "part of it")
	time.Sleep(100 * time.Millisecond)
	h.send(&agentwire.Kill{ID: 1})
	if exit, _ := h.waitTagged(1); exit.Code != killedExit {
		t.Errorf("exit %d", exit.Code)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

// Builtins acting as a user beside scripts leave the scripts alone: the
// threads asUser borrows do not end, so the processes other goroutines
// started there with Pdeathsig are not killed with them (some were, before
// those threads got the agent's identity back instead of ending).
func TestFileBuiltinsBesideScripts(t *testing.T) {
	ws, _ := nobodyTree(t)
	h := startAgentHost(t, "/")
	id := uint64(0)
	for range 3 {
		var ids []uint64
		for i := range 12 {
			id++
			h.start(id, agentwire.BuiltinWrite, true, filepath.Join(ws, strconv.Itoa(i)), "", ws, "shown")
			h.stdin(id, "hello")
			h.send(&agentwire.EOF{ID: id})
			id++
			h.send(&agentwire.Run{ID: id, Script: []byte("sleep 0.05; echo ok"), MaxOutput: 100, User: "65534:65534", Workdir: ws})
			ids = append(ids, id-1, id)
		}
		for _, i := range ids {
			if exit, out := h.waitTagged(i); exit.Code != 0 || (i%2 == 0 && out != "1:ok\n") {
				t.Errorf("call %d: exit %+v %q", i, exit, out)
			}
		}
	}
}

// The read builtin acts as the user (root's 0600 file is refused as test -r
// refuses it) and a FIFO does not stall the agent: with no writer the call
// waits, as a blocking open would, until its kill; a writer's lines are
// read as a file's.
func TestReadBuiltinUserAndFIFO(t *testing.T) {
	ws, _ := nobodyTree(t)
	must(t, os.WriteFile(filepath.Join(ws, "secret"), []byte("root's\n"), 0o600))
	fifo := filepath.Join(ws, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o666))
	h := startAgentHost(t, "/")
	readArgs := func(path string) []string { return []string{path, "1", "2000", "51200", "shown", "|END"} }
	if code, out := h.call(1, agentwire.BuiltinRead, "", readArgs(filepath.Join(ws, "secret"))...); code != 3 || out != "2:Permission denied: shown\n" {
		t.Errorf("root's file: exit %d %q", code, out)
	}

	h.start(2, agentwire.BuiltinRead, false, readArgs(fifo)...)
	time.Sleep(200 * time.Millisecond)
	h.send(&agentwire.Kill{ID: 2})
	if exit, out := h.waitTagged(2); exit.Code != killedExit || out != "" {
		t.Errorf("FIFO without a writer: exit %d %q", exit.Code, out)
	}

	h.start(3, agentwire.BuiltinRead, false, readArgs(fifo)...)
	time.Sleep(100 * time.Millisecond)
	// Nonblocking: with no reader any more the open fails, not hangs.
	w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	must(t, err)
	_, err = w.WriteString("one\ntwo\n")
	must(t, err)
	time.Sleep(50 * time.Millisecond)
	_, err = w.WriteString("three\n")
	must(t, err)
	must(t, w.Close())
	if exit, out := h.waitTagged(3); exit.Code != 0 || out != "1:T 4 3\none\ntwo\nthree\n|END" {
		t.Errorf("FIFO with a writer: exit %d %q", exit.Code, out)
	}
}

// A write lease held on the file makes the read wait, as a blocking open
// would, until its holder gives it up (or the kernel breaks
// it), instead of failing; a kill still ends the wait.
func TestReadBuiltinWaitsForALease(t *testing.T) {
	ws, _ := nobodyTree(t)
	path := filepath.Join(ws, "leased")
	must(t, os.WriteFile(path, []byte("one\n"), 0o644))
	hold := func() *os.File {
		f, err := os.Open(path)
		must(t, err)
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
			f.Close()
			t.Skipf("cannot take a write lease here: %v", err)
		}
		return f
	}
	args := []string{path, "1", "2000", "51200", "shown", "|END"}
	h := startAgentHost(t, "/")

	lease := hold()
	h.start(1, agentwire.BuiltinRead, false, args...)
	time.Sleep(200 * time.Millisecond)
	_, err := unix.FcntlInt(lease.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	must(t, err)
	if exit, out := h.waitTagged(1); exit.Code != 0 || out != "1:T 2 3\none\n|END" {
		t.Errorf("read of a leased file: exit %d %q", exit.Code, out)
	}
	lease.Close()

	lease = hold()
	defer lease.Close()
	h.start(2, agentwire.BuiltinRead, false, args...)
	time.Sleep(200 * time.Millisecond)
	h.send(&agentwire.Kill{ID: 2})
	if exit, out := h.waitTagged(2); exit.Code != killedExit || out != "" {
		t.Errorf("read of a leased file, killed: exit %d %q", exit.Code, out)
	}
}

// A relative path is taken from the call's workdir, as a process started
// there would take it, not from the agent's.
func TestReadAndLsBuiltinsRelativePath(t *testing.T) {
	ws, _ := nobodyTree(t)
	must(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "sub", "f"), []byte("one\n"), 0o644))
	h := startAgentHost(t, "/")
	run := func(id uint64, name string, args ...string) (int, string) {
		r := &agentwire.Run{ID: id, Builtin: name, MaxOutput: 1 << 20, User: "65534:65534", Workdir: ws}
		for _, a := range args {
			r.Args = append(r.Args, []byte(a))
		}
		h.send(r)
		exit, out := h.waitTagged(id)
		return exit.Code, out
	}
	if code, out := run(1, agentwire.BuiltinRead, "sub/f", "1", "10", "100", "shown", "|END"); code != 0 || out != "1:T 2 3\none\n|END" {
		t.Errorf("read sub/f: exit %d %q", code, out)
	}
	if code, out := run(2, agentwire.BuiltinLs, "sub", "shown"); code != 0 || out != "1:f f\x00" {
		t.Errorf("ls sub: exit %d %q", code, out)
	}
}

// errText says every errno as glibc's strerror does, which perl's $! and
// coreutils print.
func TestErrTextMatchesStrerror(t *testing.T) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("needs perl for glibc's strerror")
	}
	out, err := exec.Command(perl, "-e", `for (1..140) { $! = $_; print "$!\n" }`).Output()
	must(t, err)
	for i, want := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if got := errText(syscall.Errno(i + 1)); got != want {
			t.Errorf("errno %d: %q, want %q", i+1, got, want)
		}
	}
}
