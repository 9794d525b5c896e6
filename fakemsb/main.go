//go:build linux

// Command fakemsb simulates microsandbox's msb CLI for tests on hosts
// without KVM. It reproduces the contract in docs/msb.md:
// the subcommands and flags the project uses, msb's messages, exit codes
// and JSON shapes. Sandboxes and volumes live in a state directory; each
// running sandbox is a bubblewrap namespace holder, and exec/copy run
// inside its namespaces, so guests see only their own processes and mounts.
//
// Environment:
//
//	FAKEMSB_HOME     state directory (default $HOME/.fakemsb). Holds
//	                 state.json (guarded by an flock on "lock"), volumes/NAME
//	                 (each volume's data) and run/NAME.log (holder stderr).
//	FAKEMSB_NOW      RFC 3339 time used as "now" for created_at/updated_at.
//	FAKEMSB_LATENCY  Go duration slept at the start of every invocation.
//	FAKEMSB_LOG      file to which every invocation appends one JSON line
//	                 {"argv":[...],"exit":N,"ms":F}; argv excludes the program
//	                 name. The line is appended when the invocation starts,
//	                 with exit -1 and ms 0, and completed in place when it
//	                 ends, so an invocation that is killed, or that a fault
//	                 makes hang, keeps exit -1. Writers take an flock on the
//	                 file; readers that may race a writer should take a shared
//	                 one.
//	FAKEMSB_FAULTS   fault injection, see below.
//	FAKEMSB_DOCTOR   when set, `doctor` fails with this reason, as msb does
//	                 on a host that cannot boot a VM; unset, it passes.
//	FAKEMSB_VERSION  the version `--version` and `doctor` report
//	                 (default 0.6.18).
//	FAKEMSB_IMAGE_CONFIG  JSON {"user","env","workdir"}: the config every
//	                 image has, applied to exec as msb applies an image's
//	                 (default: oma-sandbox's guest image, uid 65534 with
//	                 HOME=/workspace in /workspace; "{}": root in /).
//	FAKEMSB_IMAGES   when set, the comma-separated cached image references:
//	                 `image inspect` finds them and `create --pull never`
//	                 runs only them; unset, every one is cached.
//	FAKEMSB_HOSTS    NAME=IP[,NAME=IP...]: when set, the only names an
//	                 allowlist's egress proxy resolves (tests give domains
//	                 loopback addresses); unset, the system resolver.
//
// A malformed FAKEMSB_NOW, FAKEMSB_LATENCY, FAKEMSB_FAULTS,
// FAKEMSB_IMAGE_CONFIG or FAKEMSB_HOSTS makes every
// invocation fail with exit code 2 and "error: FAKEMSB_...: reason".
//
// Fault grammar (FAKEMSB_FAULTS):
//
//	faults = rule *( ";" rule )          empty rules are ignored
//	rule   = command [ "#" N ] "=" action
//	command = create | exec | copy | stop | start | modify | remove | list | inspect |
//	          volume-create | volume-remove | volume-list | volume-inspect |
//	          image-inspect | metrics | doctor
//	          (aliases cp, rm, ls are counted as their command)
//	action = "exit:" CODE [ ":" MESSAGE ]  print MESSAGE (verbatim, may contain
//	                                       ":", not ";") and a newline on stderr,
//	                                       exit CODE (0..255); nothing runs
//	       | "hang"                        sleep until killed; nothing runs
//	       | "malformed"                   run normally, then print only the
//	                                       first half of stdout followed by `{"`
//	                                       (never valid JSON); stdout is held
//	                                       back until the end, even with --stream
//	       | "die-after:" N                run normally but die by SIGKILL once
//	                                       N bytes of stdout+stderr were written
//	                                       (an exec's guest tree is killed first)
//	       | "delay:" DURATION             sleep DURATION (a Go duration), then
//	                                       run normally
//
// N is 1-based: "exec#2" is the second exec invocation counted from the
// first invocation that saw this exact FAKEMSB_FAULTS value (changing the
// value restarts the count). Counts are kept in the state directory, so they
// span processes; an invocation counts even when its arguments are then
// refused. Without "#N" a rule applies to every invocation. The first
// matching rule wins. Example:
//
//	exec#2=exit:1:error: boom;create=hang;list#1=malformed;exec#3=die-after:10
//
// Behaviour chosen where msb leaves room: non-quiet create, start, stop,
// remove and volume remove print msb's "   ✓ Verb         NAME" progress
// line on stderr; remove of a running sandbox without --force fails with
// "error: sandbox still running: NAME"; stop of a stopped sandbox and start
// of a running one succeed without change; `metrics NAME --format json`
// (the only form) reports a Running sandbox in msb's shape with zero
// counters and fails on a Stopped one as msb does on a sandbox that has
// not run since its record was made; exec and copy on a Stopped
// sandbox start it for the call and stop it again afterwards (so a copy
// into a stopped sandbox persists only on its named volumes); guests run
// without CAP_SYS_ADMIN and a few other host-affecting capabilities and
// under internal/confine's seccomp filter (confine.go); an
// unknown exec --user fails with "error: exec failed: user not found: U";
// exec --tty, --rlimit and -q are accepted and ignored; the guest root
// outside named volumes is a tmpfs, lost on stop. README.md has the details.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// exitError ends an invocation: msg goes to stderr, out to stdout.
type exitError struct {
	code int
	msg  string
	out  string
}

func (e *exitError) Error() string { return e.msg }

// errorf formats msb's one-line error message.
func errorf(format string, a ...any) string { return fmt.Sprintf("error: "+format+"\n", a...) }

// failf is an msb-side error: "error: ..." and exit code 1.
func failf(format string, a ...any) error {
	return &exitError{code: 1, msg: errorf(format, a...)}
}

type app struct {
	home  string
	now   time.Time
	image imageConfig             // what every image's config says (FAKEMSB_IMAGE_CONFIG)
	hosts map[string][]netip.Addr // FAKEMSB_HOSTS; nil when unset
	args  []string
	start time.Time
	// tookText is the duration the next progress line ends with.
	tookText string
	// log is FAKEMSB_LOG; this invocation's record starts at logOffset
	// with logPrefix.
	log       string
	logOffset int64
	logPrefix string
	// logFile is the log's identity when the record was written: a log
	// removed or replaced since (a test resetting it) is left alone.
	logFile os.FileInfo
	stdout  io.Writer
	stderr  io.Writer

	// killGuest, when set, kills the running exec's guest tree; a
	// die-after fault calls it before dying.
	mu        sync.Mutex
	killGuest func()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == guestLauncherArg {
		runGuestLauncher(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == forwarderArg {
		runForwarder(os.Args[2:])
	}
	a := &app{args: os.Args[1:], start: time.Now()}
	os.Exit(a.run())
}

func (a *app) run() int {
	a.log = os.Getenv("FAKEMSB_LOG")
	a.logStart()
	code := a.main()
	a.logFinish(code)
	return code
}

func (a *app) main() int {
	a.stdout, a.stderr = os.Stdout, os.Stderr
	if err := a.configure(); err != nil {
		return a.report(err)
	}
	s, rest, err := resolveCommand(a.args)
	if err != nil {
		return a.report(err)
	}
	act, err := a.fault(s.key())
	if err != nil {
		return a.report(err)
	}
	var held *bytes.Buffer
	switch {
	case act == nil:
	case act.kind == "exit":
		if act.msg != "" {
			fmt.Fprintln(os.Stderr, act.msg)
		}
		return act.code
	case act.kind == "hang":
		for {
			time.Sleep(time.Hour)
		}
	case act.kind == "malformed":
		held = &bytes.Buffer{}
		a.stdout = held
	case act.kind == "die-after":
		d := &dier{left: act.n, die: a.die}
		a.stdout = &dieWriter{d: d, w: os.Stdout}
		a.stderr = &dieWriter{d: d, w: os.Stderr}
	case act.kind == "delay":
		time.Sleep(act.delay)
	}
	code := a.report(a.dispatch(s, rest))
	if held != nil {
		b := held.Bytes()
		os.Stdout.Write(append(b[:len(b)/2:len(b)/2], '{', '"'))
	}
	return code
}

// report prints err like msb and returns the exit code.
func (a *app) report(err error) int {
	if err == nil {
		return 0
	}
	e, ok := err.(*exitError)
	if !ok {
		fmt.Fprint(a.stderr, errorf("%v", err))
		return 1
	}
	io.WriteString(a.stdout, e.out)
	io.WriteString(a.stderr, e.msg)
	return e.code
}

func (a *app) configure() error {
	a.home = os.Getenv("FAKEMSB_HOME")
	if a.home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return &exitError{code: 2, msg: errorf("FAKEMSB_HOME is unset and there is no home directory")}
		}
		a.home = filepath.Join(h, ".fakemsb")
	}
	if abs, err := filepath.Abs(a.home); err == nil {
		a.home = abs
	}
	var err error
	if a.image, err = loadImageConfig(); err != nil {
		return &exitError{code: 2, msg: errorf("FAKEMSB_IMAGE_CONFIG: %v", err)}
	}
	if v, ok := os.LookupEnv("FAKEMSB_HOSTS"); ok {
		if a.hosts, err = parseHosts(v); err != nil {
			return &exitError{code: 2, msg: errorf("FAKEMSB_HOSTS: %v", err)}
		}
	}
	a.now = time.Now()
	if v := os.Getenv("FAKEMSB_NOW"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return &exitError{code: 2, msg: errorf("FAKEMSB_NOW: %v", err)}
		}
		a.now = t
	}
	if v := os.Getenv("FAKEMSB_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return &exitError{code: 2, msg: errorf("FAKEMSB_LATENCY: invalid duration %q", v)}
		}
		time.Sleep(d)
	}
	return nil
}

func (a *app) dispatch(s *spec, args []string) error {
	p, err := s.parse(args)
	if err != nil {
		return err
	}
	switch s.path {
	case "create":
		return a.create(p)
	case "exec":
		return a.exec(p)
	case "copy":
		return a.copy(p)
	case "stop":
		return a.stop(p)
	case "start":
		return a.startCmd(p)
	case "modify":
		return a.modify(p)
	case "remove":
		return a.remove(p)
	case "list":
		return a.list(p)
	case "inspect":
		return a.inspect(p)
	case "metrics":
		return a.metrics(p)
	case "volume create":
		return a.volumeCreate(p)
	case "volume remove":
		return a.volumeRemove(p)
	case "volume list":
		return a.volumeList(p)
	case "volume inspect":
		return a.volumeInspect(p)
	case "snapshot create":
		return a.snapshotCreate(p)
	case "snapshot list":
		return a.snapshotList(p)
	case "snapshot inspect":
		return a.snapshotInspect(p)
	case "snapshot remove":
		return a.snapshotRemove(p)
	case "doctor":
		return a.doctor()
	case "image inspect":
		return a.imageInspect(p)
	}
	return fmt.Errorf("unhandled subcommand %s", s.path)
}

// progress prints msb's non-quiet completion line on stderr.
func (a *app) progress(p *parsed, verb, target string) {
	if !p.has("quiet") {
		fmt.Fprintf(a.stderr, "   ✓ %-12s %s%s\n", verb, target, a.tookText)
	}
	a.tookText = ""
}

// took notes how long a start or stop that changed a sandbox took, which
// msb adds to its progress line ("   ✓ Stopped      NAME (3.1s)").
func (a *app) took(since time.Time) {
	a.tookText = fmt.Sprintf(" (%.1fs)", time.Since(since).Seconds())
}

// logStart appends this invocation's record to FAKEMSB_LOG with exit -1
// and ms 0, so that an invocation killed from outside (a client's deadline
// kills msb's process group) is still counted; logFinish fills in the real
// values in place. Exit and ms are space-padded to fixed widths, which keeps
// the record's length and its JSON valid.
func (a *app) logStart() {
	if a.log == "" {
		return
	}
	argv, _ := json.Marshal(a.args)
	if a.args == nil {
		argv = []byte("[]")
	}
	a.logPrefix = `{"argv":` + string(argv) + `,"exit":`
	rec := a.logRecord(-1, 0)
	f, err := os.OpenFile(a.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakemsb: FAKEMSB_LOG: %v\n", err)
		a.log = ""
		return
	}
	defer f.Close()
	if err := flock(f, unix.LOCK_EX); err != nil {
		a.log = ""
		return
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if _, err := f.WriteString(rec); err != nil {
		a.log = ""
		return
	}
	end, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		a.log = ""
		return
	}
	if a.logFile, err = f.Stat(); err != nil {
		a.log = ""
		return
	}
	a.logOffset = end - int64(len(rec))
}

func (a *app) logRecord(code int, ms float64) string {
	return fmt.Sprintf("%s%-4d,\"ms\":%-18s}\n", a.logPrefix, code, strconv.FormatFloat(ms, 'f', 3, 64))
}

// logFinish rewrites this invocation's record with its exit code and time.
func (a *app) logFinish(code int) {
	if a.log == "" {
		return
	}
	rec := a.logRecord(code, float64(time.Since(a.start).Microseconds())/1000)
	// Without O_APPEND: on Linux pwrite on an O_APPEND file appends.
	f, err := os.OpenFile(a.log, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if flock(f, unix.LOCK_EX) == nil {
		defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}
	// Rewrite only this invocation's own record: the same file, still
	// holding the record as logStart wrote it there.
	started := a.logRecord(-1, 0)
	if st, err := f.Stat(); err != nil || !os.SameFile(st, a.logFile) {
		return
	}
	have := make([]byte, len(started))
	if _, err := f.ReadAt(have, a.logOffset); err != nil || string(have) != started {
		return
	}
	_, _ = f.WriteAt([]byte(rec), a.logOffset)
}

// die ends the process abruptly for a die-after fault.
func (a *app) die() {
	a.mu.Lock()
	kill := a.killGuest
	a.mu.Unlock()
	if kill != nil {
		kill()
	}
	a.logFinish(-1)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	for {
		time.Sleep(time.Hour)
	}
}

// dier counts output bytes shared by stdout and stderr.
type dier struct {
	mu   sync.Mutex
	left int
	die  func()
}

type dieWriter struct {
	d *dier
	w io.Writer
}

func (w *dieWriter) Write(b []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if len(b) < w.d.left {
		w.d.left -= len(b)
		return w.w.Write(b)
	}
	_, _ = w.w.Write(b[:w.d.left])
	w.d.die()
	return 0, nil
}
