//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const hybridMountinfo = `30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
`

const hybridCgroup = `12:pids:/user.slice
5:memory:/user.slice/app
4:cpu,cpuacct:/
0::/user.slice/session-1.scope
`

func TestParseCgroupLayout(t *testing.T) {
	l := parseCgroupLayout([]byte(hybridMountinfo), []byte(hybridCgroup))
	want := map[string]string{"memory": "/sys/fs/cgroup/memory/user.slice/app", "pids": "/sys/fs/cgroup/pids/user.slice", "cpu": "/sys/fs/cgroup/cpu,cpuacct"}
	for c, d := range want {
		if l.v1[c] != d {
			t.Errorf("%s: %q, want %q", c, l.v1[c], d)
		}
	}
	if l.v2 != "/sys/fs/cgroup/unified/user.slice/session-1.scope" || len(l.mounts) != 4 {
		t.Fatalf("v2 %q mounts %q", l.v2, l.mounts)
	}
	if _, ok := l.support("memory"); !ok {
		t.Fatal("v1 memory not supported")
	}

	// A pure v2 host, mounted from a sub-tree as in a container.
	v2 := parseCgroupLayout([]byte("40 30 0:40 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
		[]byte("0::/kubepods/pod1/ctr\n"))
	if v2.v2 != "/sys/fs/cgroup/ctr" || len(v2.v1) != 0 {
		t.Fatalf("v2 layout %+v", v2)
	}
	if why, ok := v2.support("memory"); ok || !strings.Contains(why, "does not offer memory") {
		t.Fatalf("v2 without controllers: %q %v", why, ok)
	}
	v2.v2Ctl["memory"] = true
	if how, ok := v2.support("memory"); !ok || !strings.Contains(how, "CLONE_INTO_CGROUP") {
		t.Fatalf("v2 memory: %q", how)
	}
	if why, ok := (cgLayout{}).support("pids"); ok || !strings.Contains(why, "no cgroup hierarchy") {
		t.Fatalf("no cgroups: %q", why)
	}
}

// Mount points come escaped in mountinfo: each escape is undone once,
// so an escaped backslash before digits stays a backslash and digits.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/sys/fs/cgroup/a\040b`: "/sys/fs/cgroup/a b",
		`/x\011y\012z`:          "/x\ty\nz",
		`/back\134040slash`:     `/back\040slash`,
		`/sys/fs/cgroup/plain`:  "/sys/fs/cgroup/plain",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCgroupFilesV2 writes a resident sandbox's limits into a directory
// standing in for the unified hierarchy and checks the files and the
// record: its process limit is its commands group's, beside the leaf the
// sandbox enters (a unified group with children holds no process).
func TestCgroupFilesV2(t *testing.T) {
	root := t.TempDir()
	session := t.TempDir()
	l := cgLayout{v2: root, v2Ctl: map[string]bool{"memory": true, "pids": true, "cpu": true}}
	lim := Limits{MemoryBytes: 64 << 20, Processes: 10, CPUQuota: 50 * time.Millisecond}
	g, err := l.create(session, "s1", "resident", lim, true)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	parent := filepath.Join(root, "oma-s1")
	if got := read(filepath.Join(root, "cgroup.subtree_control")); got != "+memory +pids +cpu" {
		t.Fatalf("subtree_control %q", got)
	}
	if g.v2 == "" || filepath.Dir(g.v2) != parent || len(g.v1) != 0 {
		t.Fatalf("groups %+v", g)
	}
	for file, want := range map[string]string{"memory.max": "67108864", "commands/pids.max": "10", "cpu.max": "50000 100000", "cgroup.subtree_control": "+pids"} {
		if got := read(filepath.Join(g.v2, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	require.Equal(t, filepath.Join(g.v2, commandsLeaf), g.commands)
	var attr syscall.SysProcAttr
	_, dir, err := g.place([]string{"/bin/true"}, &attr)
	require.NoError(t, err)
	require.True(t, attr.UseCgroupFD)
	entered, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(attr.CgroupFD))
	require.NoError(t, dir.Close())
	require.Equal(t, filepath.Join(g.v2, agentLeaf), entered, "the sandbox enters its agent leaf")
	if got := read(filepath.Join(session, cgroupFile)); got != parent+"\n" {
		t.Fatalf("record %q", got)
	}
	if !groupLeaf.MatchString(g.leaf()) || !strings.HasPrefix(g.leaf(), "resident-") {
		t.Fatalf("group named %q", g.leaf())
	}
	events := func(oomKills, forks int) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(g.v2, "memory.events"), fmt.Appendf(nil, "low 0\noom 9\noom_kill %d\n", oomKills), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(g.commands, "pids.events"), fmt.Appendf(nil, "max %d\n", forks), 0o644))
	}
	events(2, 0)
	if n := g.notes(limitEvents{}); len(n) != 1 || n[0] != "memory limit of 64 MiB reached: the kernel killed 2 process(es)" {
		t.Fatalf("notes %q", n)
	}
	// A resident sandbox's groups outlive its calls: a call's notes are
	// what fired while it ran.
	before := g.events()
	if n := g.notes(before); len(n) != 0 {
		t.Fatalf("notes with nothing new %q", n)
	}
	events(5, 7)
	want := []string{"memory limit of 64 MiB reached: the kernel killed 3 process(es)", "process limit of 10 reached: 7 fork(s) refused"}
	if n := g.notes(before); !slices.Equal(n, want) {
		t.Fatalf("notes %q, want %q", n, want)
	}

	// The unified group freezes through its cgroup.freeze, done when its
	// events say so; a freeze the kernel does not finish is undone.
	require.Equal(t, g.v2, g.dirs["freezer"])
	require.NoError(t, os.WriteFile(filepath.Join(g.v2, "cgroup.events"), []byte("populated 1\nfrozen 1\n"), 0o644))
	within := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	require.NoError(t, g.freeze(within(time.Second), true))
	require.Equal(t, "1", read(filepath.Join(g.v2, "cgroup.freeze")))
	require.NoError(t, os.WriteFile(filepath.Join(g.v2, "cgroup.events"), []byte("populated 1\nfrozen 0\n"), 0o644))
	require.NoError(t, g.freeze(within(time.Second), false))
	require.Equal(t, "0", read(filepath.Join(g.v2, "cgroup.freeze")))
	err = g.freeze(within(50*time.Millisecond), true)
	require.ErrorContains(t, err, "not frozen 1 by the deadline")
	require.Equal(t, "0", read(filepath.Join(g.v2, "cgroup.freeze")), "a freeze that did not finish is undone")

	// A cancel ends the wait for a freeze the kernel does not finish at
	// once, not the deadline, and undoes it too.
	ctx, cancel := context.WithCancel(within(time.Minute))
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err = g.freeze(ctx, true)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second, "the cancel ended the wait")
	require.Equal(t, "0", read(filepath.Join(g.v2, "cgroup.freeze")), "a cancelled freeze is undone")

	// A thaw is waited for to its deadline, cancelled or not.
	require.NoError(t, os.WriteFile(filepath.Join(g.v2, "cgroup.events"), []byte("populated 1\nfrozen 1\n"), 0o644))
	ctx, cancel = context.WithCancel(within(100 * time.Millisecond))
	cancel()
	err = g.freeze(ctx, false)
	require.ErrorContains(t, err, "not frozen 0 by the deadline")
	require.NotErrorIs(t, err, context.Canceled)
}

func TestCgroupRecordIsValidated(t *testing.T) {
	mounts := []string{"/sys/fs/cgroup/memory"}
	for dir, ok := range map[string]bool{
		"/sys/fs/cgroup/memory/oma-s":        true,
		"/sys/fs/cgroup/memory/a/oma-s":      true,
		"/sys/fs/cgroup/memory/other":        false,
		"/sys/fs/cgroup/memory":              false,
		"/etc/oma-s":                         false,
		"/sys/fs/cgroup/memory/../oma-x":     false,
		"sys/fs/cgroup/memory/oma-s":         false,
		"/sys/fs/cgroup/memoryx/oma-s":       false,
		"/sys/fs/cgroup/memory/oma-s/":       false,
		"/sys/fs/cgroup/memory/oma-s/call-1": false,
	} {
		if got := isOurCgroup(dir, mounts); got != ok {
			t.Errorf("%s: %v", dir, got)
		}
	}
	// A tampered record never leads removal outside session groups.
	dir := t.TempDir()
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, cgroupFile), []byte(victim+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeCgroups(dir); err == nil || !exists(victim) {
		t.Fatalf("tampered record: %v", err)
	}
}
