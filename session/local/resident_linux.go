package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// A resident sandbox is found, by any process of the session's owner,
// through files in the session's directory, which no guest can reach:
const (
	residentSocket = "agent.sock"    // the agent's listening socket
	residentRecord = "resident.json" // the residentProcs that end it
	residentLock   = "resident.lock" // held while one starts or is ended
	residentLog    = "agent.log"     // the agent's stderr
	// resizeLock is held while a resize rewrites the session's limits.
	resizeLock = "resize.lock"
	// forkLock is held, shared, by each fork for as long as it keeps the
	// resident sandbox frozen: a frozen sandbox with no holder and no
	// pause was left so by a fork that died.
	forkLock = "fork.lock"
)

// procOf reads pid's start time; zero when pid is gone.
func procOf(pid int) proc {
	if start := startTime(pid); start != 0 {
		return proc{PID: pid, Start: start}
	}
	return proc{}
}

func startTime(pid int) uint64 {
	n, _ := strconv.ParseUint(statField(pid, 19), 10, 64)
	return n
}

// end SIGKILLs the sandbox's init, which takes its pid namespace and
// everything in it along, and bwrap, each only while it is still the
// process recorded, waits until deadline for them to exit, and removes
// the sandbox's groups under the session's (root is its directory). A
// paused (frozen) sandbox is thawed first, or it could not die.
func (r residentProcs) end(root string, deadline time.Time) error {
	var errs []error
	if r.Cgroup != "" {
		if g := groupsNamed(root, r.Cgroup, Limits{}); g.dirs["freezer"] != "" {
			_ = thaw(g.dirs["freezer"])
		}
	}
	for _, p := range []proc{r.Init, r.Bwrap, r.Proxy} {
		if p.PID <= 0 {
			continue
		}
		fd, err := unix.PidfdOpen(p.PID, 0)
		if err != nil {
			continue // gone
		}
		// Checked through the pidfd's process: the pid may have been
		// recycled before it was opened.
		if startTime(p.PID) != p.Start {
			unix.Close(fd)
			continue
		}
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("stopping resident sandbox process %d: %w", p.PID, err))
		} else if exited, err := waitPidfd(fd, deadline); err != nil || !exited {
			errs = append(errs, fmt.Errorf("resident sandbox process %d still running after SIGKILL (%v)", p.PID, err))
		}
		unix.Close(fd)
	}
	if r.Cgroup != "" {
		errs = append(errs, removeCgroupsNamed(root, r.Cgroup))
	}
	return errors.Join(errs...)
}

// frozen reports whether the sandbox's groups are frozen, or freezing (a
// fork copies its workspace, or a pause), whichever process froze them;
// root is the session's directory.
func (r residentProcs) frozen(root string) bool {
	return r.Cgroup != "" && groupsNamed(root, r.Cgroup, Limits{}).frozen()
}

// thawOrphaned thaws procs, a frozen resident sandbox of a session that
// is not paused, when no fork holds it frozen (the fork that froze it
// died), and reports whether it did; the caller holds the resident lock.
func thawOrphaned(ctx context.Context, root string, procs residentProcs) bool {
	f, err := os.OpenFile(filepath.Join(root, forkLock), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false
	}
	return groupsNamed(root, procs.Cgroup, Limits{}).freeze(ctx, false) == nil
}

// inDir calls fn with a short name for the session directory root
// (/proc/self/fd/N), so that a socket's path there fits in a sockaddr
// however deep root is.
func inDir(root string, fn func(dir string) error) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn("/proc/self/fd/" + strconv.Itoa(fd))
}

// listenUnix makes a listening unix socket named name in the session
// directory root, with mode, replacing any left by a sandbox that ended.
func listenUnix(root, name string, mode uint32) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	err = inDir(root, func(dir string) error {
		path := dir + "/" + name
		if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			return err
		}
		return unix.Chmod(path, mode)
	})
	if err == nil {
		err = unix.Listen(fd, 128)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("socket %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// errNoResident is a session with no agent listening.
var errNoResident = errors.New("no resident sandbox")

// dialResident connects to the session's agent: errNoResident when none
// listens.
func dialResident(ctx context.Context, root string) (net.Conn, error) {
	var conn net.Conn
	err := inDir(root, func(dir string) (err error) {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", dir+"/"+residentSocket)
		return err
	})
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, errNoResident
	}
	return conn, err
}

// lockResident takes the session's resident lock, across processes,
// waiting while ctx allows; the lock ends with its holder, even killed.
func lockResident(ctx context.Context, root string) (unlock func(), err error) {
	return lockFile(ctx, filepath.Join(root, residentLock), unix.LOCK_EX)
}

// lockResize takes the session's resize lock, across processes and
// within one (each take opens the file anew, and flock locks an open
// file, not a process), as lockResident takes its resident lock.
func lockResize(ctx context.Context, root string) (unlock func(), err error) {
	return lockFile(ctx, filepath.Join(root, resizeLock), unix.LOCK_EX)
}

// holdFreeze takes the session's fork lock, shared with other forks, for
// a fork to hold while it keeps the resident sandbox frozen.
func holdFreeze(ctx context.Context, root string) (release func(), err error) {
	return lockFile(ctx, filepath.Join(root, forkLock), unix.LOCK_SH)
}

// lockFile takes the lock of the file path, exclusive or shared (how),
// making the file if need be.
func lockFile(ctx context.Context, path string, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctxError(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readResident reads the session's record of its resident sandbox; zero
// when there is none (or none this user wrote).
func readResident(root string) residentProcs {
	var r residentProcs
	f, err := openOwned(filepath.Join(root, residentRecord))
	if err != nil {
		return r
	}
	defer f.Close()
	if json.NewDecoder(io.LimitReader(f, 4096)).Decode(&r) != nil {
		return residentProcs{}
	}
	return r
}

func writeResident(root string, r residentProcs) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(root, residentRecord+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(root, residentRecord))
}

// endRecorded forgets the resident sandbox the session's record names and
// ends it, if it still runs. The caller holds the resident lock.
func endRecorded(root string) error {
	procs := readResident(root)
	if err := os.Remove(filepath.Join(root, residentRecord)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return procs.end(root, time.Now().Add(stopTimeout))
}

// exitsWithin reports whether p has exited, or does within d.
func (p proc) exitsWithin(d time.Duration) bool {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	if startTime(p.PID) != p.Start {
		return true
	}
	exited, _ := waitPidfd(fd, time.Now().Add(d))
	return exited
}

// agentLog opens the file the agent's stderr goes to, emptied.
func agentLog(root string) (*os.File, error) {
	return os.OpenFile(filepath.Join(root, residentLog), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
}

// logTail is the end of the agent's stderr, for a diagnostic.
func logTail(root string) string {
	f, err := openOwned(filepath.Join(root, residentLog))
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > stderrTail {
		_, _ = f.Seek(fi.Size()-stderrTail, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, stderrTail))
	return string(b)
}

// startResident connects to the session's resident sandbox, starting it
// when none runs, and waits for its agent's hello.
func (s *Session) startResident(ctx context.Context, c call) (*resident, error) {
	root := s.dirs.Root
	hctx, cancel := context.WithTimeout(ctx, residentHelloTimeout)
	defer cancel()
	unlock, err := lockResident(hctx, root)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A pause marks the session before it takes this lock to freeze the
	// sandbox: a call admitted just before the mark neither starts one
	// that would run on unfrozen nor waits for a frozen agent's hello.
	if marked(root, pausedFile) {
		return nil, fmt.Errorf("local sandbox %s: paused as the call started: %w", s.rec.Name, session.ErrPaused)
	}
	// The limits as they are now, under the lock: a Resize in another
	// process rewrites them before it takes the lock to end the sandbox.
	c.limits = s.limits()
	for launched := false; ; {
		nc, err := dialResident(hctx, root)
		if errors.Is(err, errNoResident) && !launched {
			nc, err = s.launchResident(hctx, c)
			launched = true
		}
		if err != nil {
			return nil, err
		}
		procs := readResident(root)
		if !launched && procs.frozen(root) && !thawOrphaned(hctx, root, procs) {
			// A fork copies the workspace: this call runs in a sandbox
			// of its own rather than wait for the agent.
			nc.Close()
			return nil, fmt.Errorf("guest agent: %w", errResidentFrozen)
		}
		conn, err := agentchan.Open(hctx, nc, nc)
		if err == nil && !launched && conn.Older() != "" && endStandbys(hctx, conn) && residentIdle(root, procs) {
			// Idle, so nothing is lost: its next call runs this program's agent.
			_ = conn.Close()
			nc.Close()
			if err := s.endOlder(conn); err != nil {
				return nil, err
			}
			continue
		}
		if err == nil {
			watch, unwatch := newWatch(c, procs)
			return &resident{conn: conn, procs: procs, watch: watch, stop: sync.OnceFunc(func() {
				_ = conn.Close()
				unwatch()
				s.endResident(procs)
			})}, nil
		}
		nc.Close()
		// A sandbox whose agent just died still takes connections until
		// its last process holding the socket is gone: once it is, start
		// another.
		if launched || !procs.Init.exitsWithin(residentDyingTimeout) {
			return nil, fmt.Errorf("guest agent: %w (stderr: %s)", err, trimMsg(logTail(root)))
		}
		if err := endRecorded(root); err != nil {
			return nil, err
		}
	}
}

// endIfIdle ends cur, a resident sandbox whose agent is older than this
// program's, if it is idle: no call of this process runs on it (the
// caller knows), no other process has a connection to it, and nothing
// runs in it. The next call then starts one with this program's agent.
// It reports whether cur was ended.
func (s *Session) endIfIdle(ctx context.Context, cur *resident) bool {
	root := s.dirs.Root
	// The session's calls wait for the answer: while another process
	// holds the lock (it starts or ends the sandbox), ask another time.
	lctx, cancel := context.WithTimeout(ctx, olderLockWait)
	defer cancel()
	unlock, err := lockResident(lctx, root)
	if err != nil {
		return false
	}
	// Ended under the lock: no process connects to it meanwhile.
	idle := readResident(root) == cur.procs && endStandbys(ctx, cur.conn) && residentIdle(root, cur.procs)
	if idle {
		if err := s.endOlder(cur.conn); err != nil {
			s.log.Warn("local sandbox: ending the resident sandbox", "err", err)
		}
	}
	unlock()
	if idle {
		cur.stop()
	}
	return idle
}

// endStandbys asks the agent on conn to end the bashes it started ahead
// for calls to come (agentwire.BuiltinStandbyEnd), which would keep its
// sandbox from looking idle. It reports whether the agent did, or offers
// no such builtin (then it starts none).
func endStandbys(ctx context.Context, conn *agentchan.Conn) bool {
	if !conn.Offers(agentwire.BuiltinStandbyEnd) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, standbyEndTimeout)
	defer cancel()
	res, err := conn.Run(ctx, agentchan.Request{Builtin: agentwire.BuiltinStandbyEnd}, agentchan.Output{})
	return err == nil && res.ExitCode == 0
}

// endOlder ends the recorded resident sandbox, found idle, for its older
// agent (conn's), and says so; the next call starts one with this
// program's agent. The caller holds the resident lock.
func (s *Session) endOlder(conn *agentchan.Conn) error {
	s.log.Info("local sandbox: replacing an idle resident sandbox, its agent being older", "why", conn.Older())
	s.event(agentchan.Replaced)
	return endRecorded(s.dirs.Root)
}

// launchResident starts the session's resident sandbox, ending what an
// earlier one left, records it, and connects to it. The caller holds the
// resident lock.
func (s *Session) launchResident(ctx context.Context, c call) (net.Conn, error) {
	root := s.dirs.Root
	agent, err := s.agent.hostPath()
	if err != nil {
		return nil, err
	}
	c.agent = agent
	// A removal marks the session before it takes this lock to stop its
	// sandboxes: one started once it is marked would outlive the session.
	if marked(root, removingFile) {
		return nil, s.gone()
	}
	if err := endRecorded(root); err != nil {
		return nil, err
	}
	stderr, err := agentLog(root)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	ln, err := listenUnix(root, residentSocket, 0o600)
	if err != nil {
		return nil, err
	}
	procs, err := s.plat.(residentStarter).startResident(c, ln, stderr)
	// Only the sandbox holds the socket now: when it ends, nothing
	// answers there.
	ln.Close()
	if err == nil {
		err = writeResident(root, procs)
	}
	var nc net.Conn
	if err == nil {
		nc, err = dialResident(ctx, root)
	}
	if err != nil {
		_ = procs.end(root, time.Now().Add(stopTimeout))
		return nil, err
	}
	return nc, nil
}

// endResident ends the resident sandbox procs name and, when the record
// still names it, forgets it first; a sandbox another process started
// since is not touched.
func (s *Session) endResident(procs residentProcs) {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if unlock, err := lockResident(ctx, s.dirs.Root); err == nil {
		if readResident(s.dirs.Root) == procs {
			_ = os.Remove(filepath.Join(s.dirs.Root, residentRecord))
		}
		unlock()
	}
	if err := procs.end(s.dirs.Root, time.Now().Add(stopTimeout)); err != nil {
		s.log.Warn("local sandbox: ending the resident sandbox", "err", err)
	}
}

// endAnyResident ends the resident sandbox the session's record names,
// whichever process started it.
func (s *Session) endAnyResident() {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	unlock, err := lockResident(ctx, s.dirs.Root)
	if err != nil {
		return
	}
	defer unlock()
	if err := endRecorded(s.dirs.Root); err != nil {
		s.log.Warn("local sandbox: ending the resident sandbox", "err", err)
	}
}

// freezeResident freezes (frozen) or thaws the session's running resident
// sandbox, whichever process started it, with everything in it, within
// timeout; false when none runs, its groups have no freezer, or unless
// (if given) answers true, asked under the resident lock.
func freezeResident(ctx context.Context, root string, frozen bool, timeout time.Duration, unless func() bool) (bool, error) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	unlock, err := lockResident(ctx, root)
	if err != nil {
		return false, err
	}
	defer unlock()
	if unless != nil && unless() {
		return false, nil
	}
	r := readResident(root)
	if r.Init.PID == 0 || r.Cgroup == "" || procOf(r.Init.PID) != r.Init {
		return false, nil
	}
	err = groupsNamed(root, r.Cgroup, Limits{}).freeze(ctx, frozen)
	if errors.Is(err, errNoFreezer) {
		return false, nil
	}
	return err == nil, err
}

// runningResident is the session's resident sandbox as its record names
// it, and whether it runs, whichever process started it.
func runningResident(root string) (residentProcs, bool) {
	r := readResident(root)
	return r, r.Init.PID != 0 && procOf(r.Init.PID) == r.Init
}

// residentStats adds to st what the session's running resident sandbox r
// shows: its uptime, from its init's start, and its memory group's use
// and limit.
func residentStats(root string, r residentProcs, lim Limits, st *session.Stats) {
	if up, ok := uptimeOf(r.Init); ok {
		st.Uptime = &up
	}
	if r.Cgroup == "" || lim.MemoryBytes == 0 {
		return
	}
	dir, ok := groupsNamed(root, r.Cgroup, lim).dirs["memory"]
	if !ok {
		return
	}
	for _, file := range []string{"memory.current", "memory.usage_in_bytes"} {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				limit := lim.MemoryBytes
				st.MemoryBytes, st.MemoryLimitBytes = &n, &limit
				return
			}
		}
	}
}

// uptimeOf is how long p has run: its start, in clock ticks since boot
// (USER_HZ, 100 on Linux), against the boot time in /proc/stat.
func uptimeOf(p proc) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, false
			}
			start := time.Unix(boot, 0).Add(time.Duration(p.Start) * time.Second / 100)
			return max(time.Since(start), 0), true
		}
	}
	return 0, false
}

// newWatch is a resident sandbox's watch (see resident), its groups found
// and its proxy's refusal log opened once, for every call: a call reads
// only their counts and the log's new lines. unwatch closes the log.
func newWatch(c call, r residentProcs) (watch func() func() []string, unwatch func()) {
	var groups *callGroups
	if r.Cgroup != "" {
		groups = groupsNamed(c.dirs.Root, r.Cgroup, c.limits)
	}
	var log *os.File
	if r.Proxy.PID != 0 {
		log, _ = openOwned(filepath.Join(c.dirs.Root, residentRefusals))
	}
	watch = func() func() []string {
		var before limitEvents
		if groups != nil {
			before = groups.events()
		}
		var from int64
		if log != nil {
			from = egress.LogSize(log)
		}
		return func() []string {
			var notes []string
			if log != nil {
				notes = refusalNotes(log, from, c.refused)
			}
			if groups != nil {
				notes = append(notes, groups.notes(before)...)
			}
			return notes
		}
	}
	unwatch = func() {
		if log != nil {
			log.Close()
		}
	}
	return watch, unwatch
}
