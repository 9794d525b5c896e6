//go:build linux

package guestagent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/internal/netrelay"
)

// ProgramName is the name the agent runs under when it starts itself
// again (serve --userns); a program linking session/local that is run
// under it serves as the agent.
const ProgramName = "oma-guest-agent"

// ready writes R to descriptor fd and closes it: the local backend's sign
// that the sandbox is up and the call starts (the marker its shell wrapper
// writes for a script).
func ready(fd string) error {
	n, err := strconv.Atoi(fd)
	if err != nil || n < 3 {
		return fmt.Errorf("--ready-fd=%s: want a descriptor number from 3", fd)
	}
	f := os.NewFile(uintptr(n), "ready")
	_, err = f.Write([]byte{'R'})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--ready-fd=%s: %w", fd, err)
	}
	return nil
}

// serveInUserNS starts the agent again, serving, in a user namespace of
// its own (ServeInUserNS), and exits as it does.
func serveInUserNS(spec, user, workdir string, seccompFD, listenFD, commandsFD int, relay string, stderr io.Writer) int {
	root, guest, ok := strings.Cut(spec, ":")
	rootID, err1 := strconv.Atoi(root)
	guestID, err2 := strconv.Atoi(guest)
	if !ok || err1 != nil || err2 != nil || rootID <= 0 || guestID <= 0 || rootID == guestID {
		fmt.Fprintf(stderr, "oma-guest-agent: --userns=%s: want ROOT:USER, two distinct host uids above 0\n", spec)
		return 2
	}
	argv := []string{ProgramName, "serve", "--default-user", user, "--default-workdir", workdir}
	if relay != "" {
		argv = append(argv, "--egress-relay="+relay)
	}
	var files []*os.File
	if seccompFD != 0 {
		files = append(files, os.NewFile(uintptr(seccompFD), "seccomp"))
		argv = append(argv, "--seccomp-fd=3")
	}
	if listenFD != 0 {
		files = append(files, os.NewFile(uintptr(listenFD), "listener"))
		argv = append(argv, "--listen-fd="+strconv.Itoa(2+len(files)))
	}
	if commandsFD != 0 {
		files = append(files, os.NewFile(uintptr(commandsFD), "commands-cgroup"))
		argv = append(argv, "--commands-cgroup-fd="+strconv.Itoa(2+len(files)))
	}
	code, err := ServeInUserNS(rootID, guestID, argv, files)
	if err != nil {
		fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
		return 1
	}
	return code
}

// listenRelay listens on the TCP address of spec, ADDR=SOCKET, and
// returns the socket's path.
func listenRelay(spec string) (net.Listener, string, error) {
	addr, sock, ok := strings.Cut(spec, "=")
	if !ok || addr == "" || !strings.HasPrefix(sock, "/") {
		return nil, "", errors.New("want ADDR=SOCKET, SOCKET an absolute path")
	}
	l, err := net.Listen("tcp", addr)
	return l, sock, err
}

// listener takes over descriptor fd, a listening unix socket.
func listener(fd int) (net.Listener, error) {
	if fd < 3 {
		return nil, fmt.Errorf("--listen-fd=%d: want a descriptor number from 3", fd)
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("--listen-fd=%d: %w", fd, err)
	}
	if _, ok := ln.(*net.UnixListener); !ok {
		ln.Close()
		return nil, fmt.Errorf("--listen-fd=%d: not a unix socket", fd)
	}
	return ln, nil
}

// Main is oma-guest-agent's command line, `serve`, `builtin`, `install`
// and `version` (docs/guest-agent.md), as cmd/oma-guest-agent runs it and as a
// program that serves as its own agent does (ProgramName); it returns the
// exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	keepInheritedFromCommands()
	defaultIgnoredSignals()
	if len(args) == 0 || args[0] != "serve" {
		switch {
		case len(args) == 1 && args[0] == commandsInitArg:
			return commandsInit(stderr)
		case len(args) == 1 && args[0] == "version":
			fmt.Fprintf(stdout, "oma-guest-agent protocol %d\n", agentwire.Version)
			return 0
		case len(args) == 3 && args[0] == "install":
			if err := install(args[1], args[2], time.Now().Add(-abandonedAfter)); err != nil {
				fmt.Fprintf(stderr, "oma-guest-agent: install: %v\n", err)
				return 1
			}
			return 0
		case len(args) >= 2 && args[0] == "builtin":
			args = args[1:]
			if want, ok := strings.CutPrefix(args[0], "--revision="); ok && knowsRevisionOption && len(args) >= 2 {
				n, err := strconv.Atoi(want)
				if err != nil || n < 0 {
					fmt.Fprintf(stderr, "oma-guest-agent: --revision=%s: want a revision number\n", want)
					return 2
				}
				if revision < n {
					io.WriteString(stderr, agentwire.OlderThanRevision(n))
					return 2
				}
				args = args[1:]
			}
			fd, readyFD := strings.CutPrefix(args[0], "--ready-fd=")
			if readyFD && len(args) >= 2 {
				if err := ready(fd); err != nil {
					fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
					return 2
				}
				args = args[1:]
			}
			if args[0] == agentwire.BuiltinBashSupervisor && !readyFD {
				if code, ran := inOwnSession(args, stdin, stdout, stderr); ran {
					return code
				}
			}
			code, err := runBuiltin(args[0], args[1:], stdin, stdout, stderr, killedBySIGTERM())
			if err != nil {
				fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
				return 2
			}
			return code
		}
		fmt.Fprintln(stderr, "usage: oma-guest-agent serve [--default-user USER[:GROUP]] [--default-workdir DIR]\n       oma-guest-agent builtin [--revision=N] [--ready-fd=N] NAME [ARG...]\n       oma-guest-agent install STAGED PATH\n       oma-guest-agent version")
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("default-user", "", "user of a call that names none (msb's config.user); empty: the agent's own")
	workdir := fs.String("default-workdir", "/workspace", "workdir of a call that names none")
	userns := fs.String("userns", "", "ROOT:USER: serve as root of a new user namespace mapping 0 to host uid ROOT and USER to itself")
	seccompFD := fs.Int("seccomp-fd", 0, "install the seccomp filter read from this descriptor before serving")
	listenFD := fs.Int("listen-fd", 0, "serve each connection accepted on this listening unix socket as a channel, not stdin and stdout, until killed")
	relay := fs.String("egress-relay", "", "ADDR=SOCKET: listen on the TCP address ADDR and relay each connection to the unix socket SOCKET (a session's egress proxy)")
	commandsFD := fs.Int("commands-cgroup-fd", 0, "a cgroup's cgroup.procs, open for writing: every call's command starts in that group (a session's process limit)")
	pidns := fs.Bool("commands-pidns", false, "start every command in a pid and mount namespace of their own, out of which the agent cannot be named; needs CAP_SYS_ADMIN and CAP_SYS_CHROOT, which it then drops")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oma-guest-agent: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *userns != "" {
		if *pidns {
			fmt.Fprintln(stderr, "oma-guest-agent: --userns and --commands-pidns are two ways to keep out of the commands' reach: give one")
			return 2
		}
		return serveInUserNS(*userns, *user, *workdir, *seccompFD, *listenFD, *commandsFD, *relay, stderr)
	}
	var filter []byte
	if *seccompFD != 0 {
		var err error
		if filter, err = readSeccomp(*seccompFD); err != nil {
			fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
			return 1
		}
	}
	if *pidns {
		if err := outOfCommandsReach(filter); err != nil {
			fmt.Fprintf(stderr, "oma-guest-agent: --commands-pidns: %v\n", err)
			return 1
		}
	}
	if filter != nil {
		if err := installSeccomp(filter); err != nil {
			fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
			return 1
		}
	}
	if *commandsFD != 0 {
		if *commandsFD < 3 {
			fmt.Fprintf(stderr, "oma-guest-agent: --commands-cgroup-fd=%d: want a descriptor number from 3\n", *commandsFD)
			return 2
		}
		commandsCgroup = os.NewFile(uintptr(*commandsFD), "commands-cgroup")
	}
	if *relay != "" {
		// Listening before the first call, so a command's first
		// connection finds it.
		l, sock, err := listenRelay(*relay)
		if err != nil {
			fmt.Fprintf(stderr, "oma-guest-agent: --egress-relay=%s: %v\n", *relay, err)
			return 2
		}
		defer l.Close()
		go netrelay.ToUnix(l, sock)
	}
	// A write to a host that went away must fail, not kill the agent
	// before it has killed its calls. Notify, unlike ignoring the signal,
	// is not inherited by the commands.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)

	newServer := func(rw io.ReadWriter) *Server {
		return &Server{
			In: rw, Out: rw, Log: stderr,
			DefaultUser: *user, DefaultWorkdir: *workdir,
			Etc: "/etc", Shell: "/bin/bash",
		}
	}
	if *listenFD != 0 {
		// A local session's resident sandbox: its calls to come may have
		// their bash started ahead. Not on msb's channel: in a microVM
		// under software emulation, the only kind measured here, the
		// bash started ahead slowed the calls that came next
		// (docs/BENCHMARKS.md §7).
		enableStandbys()
		ln, err := listener(*listenFD)
		if err == nil {
			err = ServeConns(ln, 0, stderr, newServer)
		}
		if err != nil {
			fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
			return 1
		}
		return 0
	}
	s := newServer(struct {
		io.Reader
		io.Writer
	}{stdin, stdout})
	if err := s.Serve(); err != nil {
		fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
		return 1
	}
	return 0
}

// killedBySIGTERM closes when the process gets SIGTERM: a builtin run as
// a process of its own (one msb exec per call) ends on it as one the agent
// serves ends on a kill frame. The host's bash-kill sends it to the
// supervisor of a call it cut short, which then kills the command's whole
// tree, escaped processes too. So that the supervisor lives until then, a
// write to a host that went away fails instead of killing it by SIGPIPE.
func killedBySIGTERM() <-chan struct{} {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	killed := make(chan struct{})
	go func() {
		<-term
		close(killed)
	}()
	return killed
}

// ownSessionEnv marks the child inOwnSession starts in a session of its
// own, which is a session leader and must not start another.
const ownSessionEnv = "OMA_AGENT_OWN_SESSION"

// inOwnSession puts a bash supervisor run as a process of its own (one msb
// exec per call) into a session of its own, as the script's `setsid -w`
// did: a host that kills the msb exec that started it, with its process
// group or its session, leaves the supervisor alive for bash-kill, which
// asks it to kill the command's tree, escaped processes too. A process
// that is not a group leader starts its session in place; a leader (of its
// group, or of the session msb's exec made for it) runs the builtin again
// as a child in a new session, passes SIGTERM on to it, waits for it and
// reports ran. A call with a ready descriptor (the local backend's, whose
// sandbox ends with the call) needs none of this.
func inOwnSession(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int, ran bool) {
	if os.Getenv(ownSessionEnv) != "" {
		os.Unsetenv(ownSessionEnv) // the child: its commands do not inherit it
		return 0, false
	}
	if _, err := syscall.Setsid(); err == nil {
		return 0, false
	}
	self, err := os.Executable() // its name, not /proc/self/exe's, is the child's comm
	if err != nil {
		fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
		return 2, true
	}
	cmd := exec.Command(self, append([]string{"builtin"}, args...)...)
	cmd.Args[0] = os.Args[0] // as selfagent knows the agent
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = append(os.Environ(), ownSessionEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// SIGTERM meant for the supervisor reaches this process: pass it on.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	if err = cmd.Start(); err == nil {
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
	wait:
		for {
			select {
			case <-term:
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case err = <-waited:
				break wait
			}
		}
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return waitStatus(exit.ProcessState), true
		}
		fmt.Fprintf(stderr, "oma-guest-agent: %v\n", err)
		return 2, true
	}
	return 0, true
}
