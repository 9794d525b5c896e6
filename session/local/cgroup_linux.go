package local

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cgroupFile lists, in a session's state directory, the cgroup directories
// its calls were placed under, so Close and Reap in any process remove
// them.
const cgroupFile = "cgroups"

// controllerOf maps a limit key to the cgroup controller enforcing it.
var controllerOf = map[string]string{LimitMemory: "memory", LimitProcesses: "pids", LimitCPU: "cpu"}

// cgLayout is where this process may create groups: under its own group
// of each hierarchy, so the host's limits on us still bound the sandbox.
type cgLayout struct {
	v1     map[string]string // controller → our group's directory in its v1 hierarchy
	v2     string            // our group's directory in the unified hierarchy
	v2Ctl  map[string]bool   // controllers the unified hierarchy offers
	mounts []string          // every cgroup mount point, for validating recorded paths
}

// The host's cgroup layout as this process last read it. What a session
// is proved against (its probe at Create, its kept proof at Attach) reads
// it afresh, so a long-lived process notices the layout change (moved to
// another group, a hierarchy mounted or unmounted); what the session then
// does (calls, pause, stats, close) uses that latest read rather than
// reading it again for each.
var (
	cgroupsMu   sync.Mutex // sessions run concurrently
	cgroupsRead bool
	cgroupsLast cgLayout
)

// readCgroups reads the layout now and keeps it as the latest.
func readCgroups() cgLayout {
	cgroupsMu.Lock()
	defer cgroupsMu.Unlock()
	cgroupsLast, cgroupsRead = detectCgroups(), true
	return cgroupsLast
}

// latestCgroups is the layout last read, read now if this process has not
// read it yet (a reaper removes sessions it never attached).
func latestCgroups() cgLayout {
	cgroupsMu.Lock()
	defer cgroupsMu.Unlock()
	if !cgroupsRead {
		cgroupsLast, cgroupsRead = detectCgroups(), true
	}
	return cgroupsLast
}

// detectCgroups reads this process's cgroup layout; callers use
// readCgroups or latestCgroups, which call it holding cgroupsMu. A
// variable so that tests can count the reads.
var detectCgroups = func() cgLayout {
	mi, err1 := os.ReadFile("/proc/self/mountinfo")
	pc, err2 := os.ReadFile("/proc/self/cgroup")
	if err1 != nil || err2 != nil {
		return cgLayout{}
	}
	l := parseCgroupLayout(mi, pc)
	if l.v2 != "" {
		if data, err := os.ReadFile(filepath.Join(l.v2, "cgroup.controllers")); err == nil {
			for _, c := range strings.Fields(string(data)) {
				l.v2Ctl[c] = true
			}
		}
	}
	return l
}

// parseCgroupLayout joins /proc/self/mountinfo and /proc/self/cgroup.
func parseCgroupLayout(mountinfo, proccgroup []byte) cgLayout {
	l := cgLayout{v1: map[string]string{}, v2Ctl: map[string]bool{}}
	own := map[string]string{} // controller (or "" for unified) → our path
	for _, line := range strings.Split(string(proccgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			own[""] = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				own[c] = parts[2]
			}
		}
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		root, point, fstype := f[3], unescapeMount(f[4]), g[0]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		l.mounts = append(l.mounts, point)
		rel := func(p string) (string, bool) {
			if root == "/" {
				return p, true
			}
			if p == root || strings.HasPrefix(p, root+"/") {
				return strings.TrimPrefix(p, root), true
			}
			return "", false
		}
		if fstype == "cgroup2" {
			if p, ok := own[""]; ok {
				if r, ok := rel(p); ok {
					l.v2 = filepath.Join(point, r)
				}
			}
			continue
		}
		for _, opt := range strings.Split(g[2], ",") {
			if _, want := own[opt]; !want || (opt != "memory" && opt != "pids" && opt != "cpu" && opt != "freezer") {
				continue
			}
			if r, ok := rel(own[opt]); ok {
				l.v1[opt] = filepath.Join(point, r)
			}
		}
	}
	return l
}

// mountUnescaper undoes the octal escapes of a mountinfo path.
var mountUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

func unescapeMount(s string) string { return mountUnescaper.Replace(s) }

// support says how the layout enforces a controller, or why it cannot.
func (l cgLayout) support(controller string) (how string, ok bool) {
	if d, ok := l.v1[controller]; ok {
		return "cgroup v1 " + controller + " under " + d + ", joined by a shim before bwrap executes", true
	}
	if l.v2 != "" && l.v2Ctl[controller] {
		return "cgroup v2 " + controller + " under " + l.v2 + ", entered at clone (CLONE_INTO_CGROUP)", true
	}
	return l.missingReason(controller), false
}

// canFreeze tells whether groups of this layout can be frozen: by the v1
// freezer, or by any unified group's cgroup.freeze.
func (l cgLayout) canFreeze() bool { return l.v1["freezer"] != "" || l.v2 != "" }

// missingReason explains why a controller is unusable.
func (l cgLayout) missingReason(controller string) string {
	if l.v2 != "" {
		return "no cgroup v1 " + controller + " hierarchy, and the unified hierarchy at " + l.v2 + " does not offer " + controller
	}
	return "no cgroup hierarchy with the " + controller + " controller is mounted"
}

// callGroups are the cgroups of one call, or of a resident sandbox.
type callGroups struct {
	dirs   map[string]string // controller → the group enforcing it
	v1     []string          // cgroup.procs files the shim joins
	v2     string            // the unified group
	v2Join string            // where the sandbox enters at clone, v2 or a leaf of it
	// commands is a resident sandbox's group for the processes of its
	// calls, under its own, where its process limit binds; "" when it has
	// none. Its agent stays above it: the pids controller counts threads,
	// and a command that used the limit up must not leave the agent none.
	commands string
	limits   Limits
}

// Leaves of a resident sandbox's group under a process limit: its calls'
// processes in one, and on cgroup v2, whose inner groups hold no process,
// the sandbox itself in the other.
const (
	commandsLeaf = "commands"
	agentLeaf    = "agent"
)

// create makes groups named kind-RANDOM (a call's, or a resident
// sandbox's) under the session's groups and writes the limits into them;
// with freeze, the groups can also be frozen (freezer). Nothing is placed
// in them yet.
func (l cgLayout) create(sessionDir, sessionName, kind string, lim Limits, freeze bool) (*callGroups, error) {
	var sfx [6]byte
	_, _ = rand.Read(sfx[:])
	callName := kind + "-" + hex.EncodeToString(sfx[:])
	parentName := "oma-" + sessionName
	g := &callGroups{dirs: map[string]string{}, limits: lim}
	fail := func(err error) (*callGroups, error) {
		g.remove()
		return nil, err
	}
	v2Subtree := []string{}
	controllers := []string{}
	for _, key := range limitKeys {
		if ctl, ok := controllerOf[key]; ok && lim.has(key) {
			controllers = append(controllers, ctl)
		}
	}
	v2Freeze := false
	if freeze {
		if _, ok := l.v1["freezer"]; ok {
			controllers = append(controllers, "freezer")
		} else if v2Freeze = l.v2 != ""; !v2Freeze {
			return nil, errors.New("no cgroup v1 freezer hierarchy and no unified hierarchy: nothing can freeze a sandbox")
		}
	}
	// A resident sandbox's process limit binds its calls' processes only.
	commands := kind == "resident" && lim.Processes > 0
	for _, ctl := range controllers {
		if base, ok := l.v1[ctl]; ok {
			parent := filepath.Join(base, parentName)
			if err := ensureParent(sessionDir, parent, nil); err != nil {
				return fail(err)
			}
			dir := filepath.Join(parent, callName)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fail(err)
			}
			g.dirs[ctl] = dir
			g.v1 = append(g.v1, filepath.Join(dir, "cgroup.procs"))
			if ctl == "pids" && commands {
				g.commands = filepath.Join(dir, commandsLeaf)
				if err := os.Mkdir(g.commands, 0o755); err != nil {
					return fail(err)
				}
				g.dirs[ctl] = g.commands
			}
		} else if l.v2 != "" && l.v2Ctl[ctl] {
			v2Subtree = append(v2Subtree, ctl)
		} else {
			return fail(errors.New(l.missingReason(ctl)))
		}
	}
	if len(v2Subtree) > 0 || v2Freeze {
		parent := filepath.Join(l.v2, parentName)
		if err := ensureParent(sessionDir, parent, v2Subtree); err != nil {
			return fail(err)
		}
		dir := filepath.Join(parent, callName)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(err)
		}
		g.v2, g.v2Join = dir, dir
		for _, c := range v2Subtree {
			g.dirs[c] = dir
		}
		if v2Freeze {
			g.dirs["freezer"] = dir
		}
		if commands && slices.Contains(v2Subtree, "pids") {
			// Its limits and freezer above both leaves bind both.
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
				return fail(fmt.Errorf("cannot delegate pids in %s: %w", dir, err))
			}
			g.v2Join, g.commands = filepath.Join(dir, agentLeaf), filepath.Join(dir, commandsLeaf)
			for _, leaf := range []string{g.v2Join, g.commands} {
				if err := os.Mkdir(leaf, 0o755); err != nil {
					return fail(err)
				}
			}
			g.dirs["pids"] = g.commands
		}
	}
	if err := g.write(); err != nil {
		return fail(err)
	}
	return g, nil
}

// ensureParent creates a session's group and records it; in the unified
// hierarchy it also delegates the controllers to the session's children.
func ensureParent(sessionDir, parent string, v2ctl []string) error {
	if err := recordCgroup(sessionDir, parent); err != nil {
		return err
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if len(v2ctl) == 0 {
		return nil
	}
	enable := "+" + strings.Join(v2ctl, " +")
	for _, d := range []string{filepath.Dir(parent), parent} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
			return fmt.Errorf("cannot delegate %s in %s: %w", strings.Join(v2ctl, ", "), d, err)
		}
	}
	return nil
}

func recordCgroup(sessionDir, dir string) error {
	p := filepath.Join(sessionDir, cgroupFile)
	data, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line == dir {
			return nil
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(dir + "\n")
	return errors.Join(err, f.Close())
}

// write sets the limits, v1 or v2 file names by the group's hierarchy.
func (g *callGroups) write() error {
	set := func(dir, file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("cannot set %s in %s: %w", file, dir, err)
		}
		return nil
	}
	v2 := func(dir string) bool { return dir == g.v2 }
	if dir, ok := g.dirs["memory"]; ok {
		n := strconv.FormatInt(g.limits.MemoryBytes, 10)
		if v2(dir) {
			if err := set(dir, "memory.max", n); err != nil {
				return err
			}
			if exists(filepath.Join(dir, "memory.swap.max")) {
				if err := set(dir, "memory.swap.max", "0"); err != nil {
					return err
				}
			}
		} else {
			if err := set(dir, "memory.limit_in_bytes", n); err != nil {
				return err
			}
			// Swap must not extend the limit.
			if exists(filepath.Join(dir, "memory.memsw.limit_in_bytes")) {
				if err := set(dir, "memory.memsw.limit_in_bytes", n); err != nil {
					return err
				}
			}
		}
	}
	if dir, ok := g.dirs["pids"]; ok {
		if err := set(dir, "pids.max", strconv.FormatInt(g.limits.Processes, 10)); err != nil {
			return err
		}
	}
	if dir, ok := g.dirs["cpu"]; ok {
		q := strconv.FormatInt(g.limits.CPUQuota.Microseconds(), 10)
		p := strconv.FormatInt(g.limits.cpuPeriod().Microseconds(), 10)
		if v2(dir) {
			return set(dir, "cpu.max", q+" "+p)
		}
		if err := set(dir, "cpu.cfs_period_us", p); err != nil {
			return err
		}
		return set(dir, "cpu.cfs_quota_us", q)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// place makes the process argv starts enter the groups from its first
// instruction: on cgroup v1 through the join shim (the argv returned), on
// v2 at clone, through attr and the group's directory, which the caller
// closes once the process started (nil on v1).
func (g *callGroups) place(argv []string, attr *syscall.SysProcAttr) ([]string, *os.File, error) {
	if len(g.v1) > 0 {
		shim := append([]string{"/bin/sh", "-c", joinScript, "oma-sandbox-join"}, g.v1...)
		argv = append(append(shim, "--"), argv...)
	}
	if g.v2Join == "" {
		return argv, nil, nil
	}
	f, err := os.Open(g.v2Join)
	if err != nil {
		return nil, nil, err
	}
	attr.UseCgroupFD, attr.CgroupFD = true, int(f.Fd())
	return argv, f, nil
}

// leaf is the name of the groups, the same in every hierarchy.
func (g *callGroups) leaf() string {
	for _, dir := range g.dirs {
		return filepath.Base(groupOf(dir))
	}
	return ""
}

// groupOf is the group a controller's directory belongs to: a resident
// sandbox's commands group is its sandbox's.
func groupOf(dir string) string {
	if filepath.Base(dir) == commandsLeaf {
		return filepath.Dir(dir)
	}
	return dir
}

// errNoFreezer is a group that cannot be frozen.
var errNoFreezer = errors.New("the sandbox's groups have no freezer")

// freeze freezes every process in the groups (or thaws them), waiting
// until the kernel reports them all frozen or ctx ends (its deadline, or a
// cancel); a freeze that does not complete by then is undone. A thaw, once
// asked, is waited for to ctx's deadline even when ctx is cancelled: a
// Resume cancelled there must not leave its sandbox thawing while the
// session is still marked paused.
func (g *callGroups) freeze(ctx context.Context, frozen bool) error {
	dir, ok := g.dirs["freezer"]
	if !ok {
		return errNoFreezer
	}
	if deadline, ok := ctx.Deadline(); ok && !frozen {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
	}
	file, value, state, want := "freezer.state", "THAWED", "freezer.state", "THAWED"
	if dir == g.v2 {
		file, value, state, want = "cgroup.freeze", "0", "cgroup.events", "frozen 0"
		if frozen {
			value, want = "1", "frozen 1"
		}
	} else if frozen {
		value, want = "FROZEN", "FROZEN"
	}
	set := func() error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("cannot write %s in %s: %w", file, dir, err)
		}
		return nil
	}
	if err := set(); err != nil {
		return err
	}
	again := time.Now().Add(refreezeAfter)
	for {
		data, err := os.ReadFile(filepath.Join(dir, state))
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(data)) {
			if strings.TrimSpace(line) == want {
				return nil
			}
		}
		if frozen && time.Now().After(again) {
			// The v1 freezer has been seen to stay FREEZING with every
			// task of the group frozen (one freeze in twenty to a hundred
			// while calls start processes); a thaw and a freeze again
			// settle it (TestPauseFreezesUnderLoad).
			if err := thaw(dir); err != nil {
				return err
			}
			if err := set(); err != nil {
				return err
			}
			again = time.Now().Add(refreezeAfter)
		}
		select {
		case <-ctx.Done():
			if frozen {
				_ = thaw(dir)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("cgroup %s: not %s by the deadline", dir, want)
			}
			return fmt.Errorf("cgroup %s: not %s: %w", dir, want, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// frozen reports whether the groups are frozen or being frozen: what
// freeze asked last, whichever process asked it.
func (g *callGroups) frozen() bool {
	dir, ok := g.dirs["freezer"]
	if !ok {
		return false
	}
	file, asked := "freezer.state", []string{"FROZEN", "FREEZING"}
	if dir == g.v2 {
		file, asked = "cgroup.freeze", []string{"1"}
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	return err == nil && slices.Contains(asked, strings.TrimSpace(string(data)))
}

// refreezeAfter is how long a freeze may take before it is asked again.
const refreezeAfter = 250 * time.Millisecond

// thaw lets a group's frozen processes run again, which they must before
// a SIGKILL can end them on cgroup v1; a group that was not frozen is
// left as it was.
func thaw(dir string) error {
	var errs []error
	for file, value := range map[string]string{"freezer.state": "THAWED", "cgroup.freeze": "0"} {
		f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			_, err = f.WriteString(value)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// limitEvents counts the times the kernel enforced a group's limits.
type limitEvents struct {
	oomKills, forksRefused int64
}

func (g *callGroups) events() limitEvents {
	var e limitEvents
	if dir, ok := g.dirs["memory"]; ok {
		file := "memory.oom_control"
		if dir == g.v2 {
			file = "memory.events"
		}
		e.oomKills = counter(filepath.Join(dir, file), "oom_kill")
	}
	if dir, ok := g.dirs["pids"]; ok {
		e.forksRefused = counter(filepath.Join(dir, "pids.events"), "max")
	}
	return e
}

// notes reports the limits that fired since the counts before.
func (g *callGroups) notes(before limitEvents) []string {
	var out []string
	now := g.events()
	if n := now.oomKills - before.oomKills; n > 0 {
		out = append(out, fmt.Sprintf("memory limit of %s reached: the kernel killed %d process(es)", formatBytes(g.limits.MemoryBytes), n))
	}
	if n := now.forksRefused - before.forksRefused; n > 0 {
		out = append(out, fmt.Sprintf("process limit of %d reached: %d fork(s) refused", g.limits.Processes, n))
	}
	return out
}

// groupsNamed are the groups named leaf under a session directory's
// recorded groups, for reading their counts: found by their files, not by
// this process's own place in the hierarchies, as any process of the
// session's may read a resident sandbox's.
func groupsNamed(sessionDir, leaf string, lim Limits) *callGroups {
	g := &callGroups{dirs: map[string]string{}, limits: lim}
	parents, _ := recordedCgroups(sessionDir)
	for _, parent := range parents {
		dir := filepath.Join(parent, leaf)
		// Only a unified group has cgroup.freeze.
		if exists(filepath.Join(dir, "cgroup.freeze")) {
			g.v2 = dir
			g.dirs["freezer"] = dir
		}
		if exists(filepath.Join(dir, "freezer.state")) {
			g.dirs["freezer"] = dir
		}
		if exists(filepath.Join(dir, "memory.oom_control")) || exists(filepath.Join(dir, "memory.events")) {
			g.dirs["memory"] = dir
		}
		if exists(filepath.Join(dir, commandsLeaf, "pids.events")) {
			g.dirs["pids"] = filepath.Join(dir, commandsLeaf)
		} else if exists(filepath.Join(dir, "pids.events")) {
			g.dirs["pids"] = dir
		}
	}
	return g
}

// counter reads "key N" from a flat-keyed cgroup file.
func counter(file, key string) int64 {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func formatBytes(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// remove kills whatever is left in the call's groups and removes them,
// and the session's groups too once no other call uses them, so nothing
// of ours stays under this process's cgroups between calls.
func (g *callGroups) remove() error {
	var errs []error
	seen := map[string]bool{}
	for _, dir := range g.dirs {
		if dir = groupOf(dir); !seen[dir] {
			seen[dir] = true
			errs = append(errs, emptyAndRemove(dir))
			_ = syscall.Rmdir(filepath.Dir(dir)) // busy while another call runs
		}
	}
	return errors.Join(errs...)
}

// emptyAndRemove SIGKILLs every process in a group and its children, then
// removes them, retrying while the kernel finishes the exits.
func emptyAndRemove(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := emptyAndRemove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if exists(filepath.Join(dir, "cgroup.kill")) {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		}
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		// Killed while frozen (a paused sandbox), they die once thawed.
		_ = thaw(dir)
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s not removable: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// thawCgroups thaws every group under a session directory's recorded
// groups, so that its processes can be killed.
func thawCgroups(sessionDir string) {
	dirs, _ := recordedCgroups(sessionDir)
	for _, dir := range dirs {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && groupLeaf.MatchString(e.Name()) {
				_ = thaw(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// removeCgroups removes every group recorded for a session directory.
// Only directories named oma-* on a mounted cgroup filesystem are touched,
// whatever the record says.
func removeCgroups(sessionDir string) error {
	dirs, err := recordedCgroups(sessionDir)
	for _, dir := range dirs {
		err = errors.Join(err, emptyAndRemove(dir))
	}
	return err
}

// groupLeaf is how create names a group: a call's or a resident
// sandbox's, and 12 hex digits.
var groupLeaf = regexp.MustCompile(`^(call|resident)-[0-9a-f]{12}$`)

// removeCgroupsNamed removes the groups named leaf under each of a
// session directory's recorded groups, and those groups too once empty.
func removeCgroupsNamed(sessionDir, leaf string) error {
	if !groupLeaf.MatchString(leaf) {
		return fmt.Errorf("refusing to remove cgroup %q: not a name this program gives", leaf)
	}
	dirs, err := recordedCgroups(sessionDir)
	for _, dir := range dirs {
		err = errors.Join(err, emptyAndRemove(filepath.Join(dir, leaf)))
		_ = syscall.Rmdir(dir) // busy while a call's group is in it
	}
	return err
}

// recordedCgroups are the session's groups its directory records, those
// named oma-* on a mounted cgroup filesystem; err names any other.
func recordedCgroups(sessionDir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(sessionDir, cgroupFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	mounts := latestCgroups().mounts
	var dirs []string
	var errs []error
	for _, dir := range strings.Fields(string(data)) {
		if !isOurCgroup(dir, mounts) {
			errs = append(errs, fmt.Errorf("refusing to remove %q: not a session cgroup", dir))
			continue
		}
		dirs = append(dirs, dir)
	}
	return dirs, errors.Join(errs...)
}

func isOurCgroup(dir string, mounts []string) bool {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || !strings.HasPrefix(filepath.Base(dir), "oma-") {
		return false
	}
	for _, m := range mounts {
		if dir != m && within(dir, m) {
			return true
		}
	}
	return false
}

// joinScript is the shim that contains a call from its first instruction
// on a cgroup v1 host: it writes its own pid into each group, and only if
// every write succeeded does it exec the sandbox, which inherits them.
const joinScript = `for f do
[ "$f" = -- ] && break
echo $$ > "$f" || { echo "oma-sandbox: cannot join cgroup $f" >&2; exit 125; }
shift
done
shift
exec "$@"`
