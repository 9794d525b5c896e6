// Package fakemsbtest gives integration tests a private fakemsb: a fresh
// state directory and invocation log per Env, and an executable wrapper
// script (Env.Bin) that runs fakemsb with that Env's knobs, so callers use
// it as msb.CLI{Path: env.Bin} even though the msb runner passes the child
// only HOME, PATH, TMP* and msb's own MSB_* variables.
//
// The fakemsb binary is built once per test binary. Each Env's cleanup
// force-removes its sandboxes and fails the test if a namespace holder of
// that Env is still alive afterwards.
package fakemsbtest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Env is one isolated fakemsb installation.
type Env struct {
	// Bin is an executable wrapper script that runs fakemsb with this Env's
	// FAKEMSB_HOME, FAKEMSB_LOG and knobs.
	Bin string
	// Home is FAKEMSB_HOME, LogPath is FAKEMSB_LOG.
	Home, LogPath string
	// Fakemsb is the fakemsb binary the wrapper runs.
	Fakemsb string

	knobsPath string
	mu        sync.Mutex
	knobs     map[string]string
}

// Invocation is one record of FAKEMSB_LOG. Exit is -1 while the
// invocation runs and stays -1 when it was killed or hung.
type Invocation struct {
	Argv []string `json:"argv"`
	Exit int      `json:"exit"`
	Ms   float64  `json:"ms"`
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of the fakemsb binary, building it on first use.
func Binary(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("fakemsb runs on Linux only")
	}
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("fakemsbtest: %v", buildErr)
	}
	return buildPath
}

func build() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the module root")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// One stable directory per checkout, so repeated test runs do not pile
	// up binaries; build under a temporary name and rename it into place so
	// that a concurrent test binary never runs a half-written file.
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("fakemsbtest-%x", sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "fakemsb-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	cmd := exec.Command(goBin, "build", "-o", tmp.Name(), "./fakemsb")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("go build ./fakemsb: %v\n%s", err, msg)
	}
	out := filepath.Join(dir, "fakemsb")
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// New returns a fresh Env under t.TempDir(). Its cleanup force-removes
// every sandbox and verifies that no holder process of the Env remains.
func New(t testing.TB) *Env {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	e := &Env{
		Bin:       filepath.Join(dir, "msb"),
		Home:      filepath.Join(dir, "home"),
		LogPath:   filepath.Join(dir, "invocations.jsonl"),
		Fakemsb:   bin,
		knobsPath: filepath.Join(dir, "knobs.sh"),
		knobs:     map[string]string{},
	}
	if err := os.MkdirAll(e.Home, 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeKnobs(t)
	script := fmt.Sprintf("#!/bin/sh\nFAKEMSB_HOME=%s\nFAKEMSB_LOG=%s\nexport FAKEMSB_HOME FAKEMSB_LOG\n. %s\nexec %s \"$@\"\n",
		quote(e.Home), quote(e.LogPath), quote(e.knobsPath), quote(bin))
	if err := os.WriteFile(e.Bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cleanup(t) })
	return e
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var knobName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// SetKnob sets an environment variable for later invocations through Bin,
// e.g. SetKnob("FAKEMSB_FAULTS", "exec#1=hang"). An empty value unsets it.
func (e *Env) SetKnob(name, value string) {
	if !knobName.MatchString(name) {
		panic("fakemsbtest: invalid knob name " + name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if value == "" {
		delete(e.knobs, name)
	} else {
		e.knobs[name] = value
	}
	if err := e.saveKnobs(); err != nil {
		panic("fakemsbtest: " + err.Error())
	}
}

func (e *Env) writeKnobs(t testing.TB) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.saveKnobs(); err != nil {
		t.Fatal(err)
	}
}

// saveKnobs rewrites the knobs file atomically, so a concurrent invocation
// reads either the old or the new set.
func (e *Env) saveKnobs() error {
	names := make([]string, 0, len(e.knobs))
	for k := range e.knobs {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%s\nexport %s\n", k, quote(e.knobs[k]), k)
	}
	tmp := e.knobsPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, e.knobsPath)
}

// Invocations returns every record logged so far, oldest first.
func (e *Env) Invocations(t testing.TB) []Invocation {
	t.Helper()
	f, err := os.Open(e.LogPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// fakemsb completes a record in place when its invocation ends; the
	// shared lock keeps a half-rewritten record from being read.
	if err := lockShared(f); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []Invocation
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var inv Invocation
		if err := json.Unmarshal(sc.Bytes(), &inv); err != nil {
			t.Fatalf("fakemsbtest: bad log line %q: %v", sc.Text(), err)
		}
		out = append(out, inv)
	}
	return out
}

// ResetLog forgets every logged invocation.
func (e *Env) ResetLog(t testing.TB) {
	t.Helper()
	if err := os.Remove(e.LogPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

type stateFile struct {
	Sandboxes map[string]struct {
		Status string `json:"status"`
		Holder *struct {
			InitPID int `json:"init_pid"`
		} `json:"holder"`
		CopyFiles []copyFile `json:"copy_files"`
	} `json:"sandboxes"`
	Volumes   map[string]json.RawMessage `json:"volumes"`
	Snapshots map[string]json.RawMessage `json:"snapshots"`
}

type copyFile struct {
	Dst string `json:"dst"`
}

func (e *Env) state(t testing.TB) stateFile {
	t.Helper()
	st, err := e.readState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *Env) readState() (stateFile, error) {
	var st stateFile
	data, err := os.ReadFile(filepath.Join(e.Home, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("fakemsbtest: state: %w", err)
	}
	return st, nil
}

// Sandboxes returns the names of the sandboxes in the state, sorted.
func (e *Env) Sandboxes(t testing.TB) []string {
	t.Helper()
	return sortedKeys(e.state(t).Sandboxes)
}

// Status is the sandbox's status in the state ("Starting", "Running",
// "Stopped"), or "" when the state has no such sandbox.
func (e *Env) Status(t testing.TB, name string) string {
	t.Helper()
	return e.state(t).Sandboxes[name].Status
}

// GuestFile returns the path, through its holder's /proc/PID/root, of the
// file fakemsb placed at guestPath in the running sandbox for its create's
// --copy-file. A guest that is root can replace such a file; a test
// rewriting this one in place does it.
func (e *Env) GuestFile(sandbox, guestPath string) (string, error) {
	st, err := e.readState()
	if err != nil {
		return "", err
	}
	sb := st.Sandboxes[sandbox]
	if !slices.ContainsFunc(sb.CopyFiles, func(f copyFile) bool { return f.Dst == guestPath }) {
		return "", fmt.Errorf("fakemsbtest: sandbox %s has no copied file at %s", sandbox, guestPath)
	}
	if sb.Holder == nil {
		return "", fmt.Errorf("fakemsbtest: sandbox %s is not running", sandbox)
	}
	return filepath.Join("/proc", strconv.Itoa(sb.Holder.InitPID), "root", guestPath), nil
}

// Volumes returns the names of the volumes in the state, sorted.
func (e *Env) Volumes(t testing.TB) []string {
	t.Helper()
	return sortedKeys(e.state(t).Volumes)
}

// Snapshots returns the names of the snapshots in the state, sorted.
func (e *Env) Snapshots(t testing.TB) []string {
	t.Helper()
	return sortedKeys(e.state(t).Snapshots)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Run runs Bin with args, no stdin, and returns its output and exit code.
func (e *Env) Run(t testing.TB, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(e.Bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	default:
		t.Fatalf("fakemsbtest: run %v: %v", args, err)
	}
	return out.String(), errb.String(), exit
}

// Holders returns the pids of live holder processes of this Env (each
// running sandbox has two: bwrap and the sandbox's pid 1).
func (e *Env) Holders() []int {
	var out []int
	for _, h := range holders(e.Home) {
		out = append(out, h.pid)
	}
	return out
}

type holderProc struct {
	pid     int
	sandbox string
}

func holders(home string) []holderProc {
	var out []holderProc
	eachLiveProc(func(pid int, args []string) {
		for i := 0; i+1 < len(args); i++ {
			if name, ok := strings.CutPrefix(args[i+1], home+"|"); ok && args[i] == "FAKEMSB_HOLDER" {
				out = append(out, holderProc{pid: pid, sandbox: name})
				return
			}
		}
	})
	return out
}

// HolderSandboxes maps the pids of this Env's live holder processes to
// their sandboxes' names (fakemsb tags each holder's command line).
func (e *Env) HolderSandboxes() map[int]string {
	out := map[int]string{}
	for _, h := range holders(e.Home) {
		out[h.pid] = h.sandbox
	}
	return out
}

// eachLiveProc calls fn with the pid and arguments of every process that
// still runs.
func eachLiveProc(fn func(pid int, args []string)) {
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		// A zombie has an empty command line: it is no longer running.
		data, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil || len(data) == 0 {
			continue
		}
		fn(pid, strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00"))
	}
}

func (e *Env) cleanup(t testing.TB) {
	// Knobs such as faults must not break the cleanup itself.
	e.mu.Lock()
	e.knobs = map[string]string{}
	err := e.saveKnobs()
	e.mu.Unlock()
	if err != nil {
		t.Error(err)
	}
	names := e.Sandboxes(t)
	if len(names) > 0 {
		if _, stderr, code := e.Run(t, append([]string{"remove", "--force", "-q"}, names...)...); code != 0 {
			t.Errorf("fakemsbtest: cleanup remove: exit %d: %s", code, stderr)
		}
	}
	recorded := func() bool {
		for _, h := range holders(e.Home) {
			if slices.Contains(names, h.sandbox) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); recorded() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// A holder that the state never recorded belongs to a create that was
	// killed while starting it, as a client's deadline can do: msb would
	// leave such a VM behind too. It is killed here and only logged; a
	// recorded one that survived remove --force is a fakemsb failure.
	for _, h := range holders(e.Home) {
		if slices.Contains(names, h.sandbox) {
			t.Errorf("fakemsbtest: holder %d of sandbox %q still alive after remove --force", h.pid, h.sandbox)
		} else {
			t.Logf("fakemsbtest: killing holder %d of %q, which a killed create left behind", h.pid, h.sandbox)
		}
		killPid(h.pid)
	}
}
