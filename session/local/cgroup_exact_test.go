//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLimitsAreWrittenExactly reads back, while a call runs, every limit
// file of its cgroups on this host's real hierarchies: the values must be
// exactly the session's, and the command must be in the groups. They are
// the call's own groups in a sandbox per call, else (as root) the
// session's resident sandbox's, whose process limit is its commands
// group's.
func TestLimitsAreWrittenExactly(t *testing.T) {
	for _, tc := range []struct {
		lim    Limits
		groups string
		want   map[string]string
	}{{
		lim:    Limits{MemoryBytes: 64 << 20, Processes: 50, CPUQuota: 10 * time.Millisecond, CPUPeriod: 100 * time.Millisecond},
		groups: "call-",
		want: map[string]string{
			"memory.limit_in_bytes": "67108864", "pids.max": "50",
			"cpu.cfs_quota_us": "10000", "cpu.cfs_period_us": "100000",
			// The same limits in the unified hierarchy's names.
			"memory.max": "67108864", "cpu.max": "10000 100000",
		},
	}, {
		lim:    Limits{MemoryBytes: 96 << 20, Processes: 40, CPUQuota: 20 * time.Millisecond, CPUPeriod: 50 * time.Millisecond},
		groups: "resident-",
		want: map[string]string{
			"memory.limit_in_bytes": "100663296", "cpu.cfs_quota_us": "20000", "cpu.cfs_period_us": "50000",
			"memory.max": "100663296", "cpu.max": "20000 50000", commandsLeaf + "/pids.max": "40",
		},
	}} {
		t.Run(strings.TrimSuffix(tc.groups, "-"), func(t *testing.T) {
			if tc.groups == "resident-" && os.Geteuid() != 0 {
				t.Skip("only root starts a resident sandbox")
			}
			s := newTestSession(t, Options{Limits: tc.lim, SandboxPerCall: tc.groups == "call-"})
			parents, stop := waitingCall(t, s)
			defer stop()
			seen := map[string]bool{}
			for _, parent := range parents {
				groups, _ := filepath.Glob(filepath.Join(parent, "*-*"))
				if len(groups) != 1 || !strings.HasPrefix(filepath.Base(groups[0]), tc.groups) {
					t.Fatalf("%s holds groups %q, want one %s*", parent, groups, tc.groups)
				}
				if procs, _ := os.ReadFile(filepath.Join(groups[0], "cgroup.procs")); len(strings.Fields(string(procs))) == 0 {
					t.Errorf("no process in %s", groups[0])
				}
				for file, v := range tc.want {
					got, err := os.ReadFile(filepath.Join(groups[0], file))
					if err != nil {
						continue
					}
					seen[file] = true
					if strings.TrimSpace(string(got)) != v {
						t.Errorf("%s/%s = %q, want %q", groups[0], file, strings.TrimSpace(string(got)), v)
					}
				}
			}
			v1 := seen["cpu.cfs_quota_us"] && seen["cpu.cfs_period_us"] && seen["memory.limit_in_bytes"]
			v2 := seen["cpu.max"] && seen["memory.max"]
			if !seen["pids.max"] && !seen[commandsLeaf+"/pids.max"] || !v1 && !v2 {
				t.Fatalf("limit files found: %v", seen)
			}
		})
	}
}

// TestCgroupV2EntersAtClone exercises the unified-hierarchy path on any
// host: a call under a v2 layout is started with CLONE_INTO_CGROUP on its
// own group (no join shim), and, where this process may mount a cgroup2
// hierarchy, the sandboxed command really starts inside that group.
func TestCgroupV2EntersAtClone(t *testing.T) {
	s := newTestSession(t, Options{})
	p := *s.plat.(*linuxPlatform)
	fake := t.TempDir() // stands in for the unified hierarchy's files
	p.cgroups = cgLayout{v2: fake, v2Ctl: map[string]bool{"pids": true}}
	dirs := s.dirs
	dirs.Root = t.TempDir() // the fake group is recorded here, not in the session
	l, err := p.launch(call{name: s.Name(), dirs: dirs, policy: s.rec.Policy, limits: Limits{Processes: 10},
		env: s.env, workdir: guestWorkspace, argv: []string{"/bin/sh", "-c", "cat /proc/self/cgroup"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.finish()
	attr := l.cmd.SysProcAttr
	if attr == nil || !attr.UseCgroupFD {
		t.Fatal("a v2 call is not started into its cgroup (UseCgroupFD unset)")
	}
	group, err := os.Readlink("/proc/self/fd/" + itoa(attr.CgroupFD))
	if err != nil || filepath.Dir(group) != filepath.Join(fake, "oma-"+s.Name()) || !strings.HasPrefix(filepath.Base(group), "call-") {
		t.Fatalf("CgroupFD names %q (%v), not the call's group", group, err)
	}
	if got, _ := os.ReadFile(filepath.Join(group, "pids.max")); string(got) != "10" {
		t.Fatalf("pids.max %q", got)
	}
	for _, a := range l.cmd.Args {
		if a == "oma-sandbox-join" {
			t.Fatal("a v2 call goes through the v1 join shim")
		}
	}

	if os.Geteuid() != 0 {
		t.Skip("the real-kernel half needs root to mount a cgroup2 hierarchy")
	}
	mnt := t.TempDir()
	if err := unix.Mount("none", mnt, "cgroup2", 0, ""); err != nil {
		t.Skipf("cannot mount cgroup2: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	real := filepath.Join(mnt, "oma-test-"+itoa(os.Getpid()))
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(real)
	f, err := os.Open(real)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	attr.CgroupFD = int(f.Fd())
	res, err := run(context.Background(), runSpec{cmd: l.cmd, marker: l.marker, start: l.start, maxOutput: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::/" + filepath.Base(real) + "\n"; !strings.Contains(string(res.Stdout), want) {
		t.Fatalf("the command was not in the v2 group from its start: %q, want a line %q", res.Stdout, want)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
