//go:build unix

package chaos

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// checkClean verifies that nothing of the run is left: no sandbox and no
// volume in any fakemsb's state; no holder process of any of them; no
// fakemsb process of theirs still running; no child of this process. A
// guest process cannot outlive its sandbox's holder, since the kernel kills
// a pid namespace with its init, so no holder means no guest process.
func checkClean(t *testing.T, envs []*fakemsbtest.Env, rec *recorder) {
	t.Helper()
	homes := map[string]string{}
	for i, env := range envs {
		homes["FAKEMSB_HOME="+env.Home] = fmt.Sprintf("fakemsb %d", i)
		if sb := env.Sandboxes(t); len(sb) > 0 {
			t.Errorf("fakemsb %d: sandboxes left: %v", i, sb)
		}
		if v := env.Volumes(t); len(v) > 0 {
			t.Errorf("fakemsb %d: volumes left: %v", i, v)
		}
		holders := env.HolderSandboxes()
		if len(holders) == 0 {
			continue
		}
		state := env.Sandboxes(t)
		rec.mu.Lock()
		orphans := map[string]bool{}
		for pid, name := range holders {
			// The session did its part: it removed the sandbox after the
			// create it had to kill.
			if !slices.Contains(state, name) && rec.killed[name] {
				orphans[name] = true
				continue
			}
			t.Errorf("fakemsb %d: holder %d of sandbox %s left", i, pid, name)
		}
		for name := range orphans {
			rec.sawKnown("killed-create-holder", "the holder of "+name)
		}
		rec.mu.Unlock()
	}
	checkNoProcessesWith(t, homes)
}

// checkNoProcessesWith fails for any child of this process still running
// and any process whose environment holds a KEY=VALUE of marks, the error
// naming what marks maps it to.
func checkNoProcessesWith(t *testing.T, marks map[string]string) {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	eachLiveProcess(func(pid, dir, ppid, what string) {
		if ppid == self {
			t.Errorf("child process %s left: %.200s", pid, what)
		}
		environ, _ := os.ReadFile(dir + "/environ")
		for kv := range strings.SplitSeq(string(environ), "\x00") {
			if owner, ok := marks[kv]; ok {
				t.Errorf("%s: process %s left: %.200s", owner, pid, what)
			}
		}
	})
}

// eachLiveProcess calls fn for every process that is not a zombie, with
// its pid, its /proc directory, its parent's pid and its command line
// (arguments joined by spaces).
func eachLiveProcess(fn func(pid, dir, ppid, cmdline string)) {
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		dir := "/proc/" + ent.Name()
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state, ppid, ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		fn(ent.Name(), dir, fields[1], strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
}
