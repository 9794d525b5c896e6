//go:build unix

package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/oma-sandbox/oma-sandbox/internal/netrelay"
)

// RelayName is the file name a program linking this package is run under
// to act as the in-sandbox relay (see Relay): the init hook below checks
// argv[0], so any binary that imports egress (the CLI, a test binary, a
// library user's program) can be bound into a sandbox and run as it.
const RelayName = "oma-egress-relay"

func init() {
	if filepath.Base(os.Args[0]) == RelayName {
		os.Exit(Relay(os.Args[1:], os.Stderr))
	}
}

// Relay runs `SOCKET ADDR -- COMMAND [ARG...]` inside a sandbox: it
// listens on the loopback address ADDR, relays every connection to the
// unix socket SOCKET (the host-side Proxy, bound into the sandbox), and
// runs COMMAND as its child, returning its exit status (128+N for signal
// N). The listener is up before the command starts, so the command's
// first connection finds it.
func Relay(args []string, stderr io.Writer) int {
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(stderr, "oma-sandbox egress relay: want SOCKET ADDR -- COMMAND [ARG...]")
		return 126
	}
	sock, addr, argv := args[0], args[1], args[3:]
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "oma-sandbox egress relay: %v\n", err)
		return 126
	}
	defer l.Close()
	go netrelay.ToUnix(l, sock)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "oma-sandbox egress relay: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(stderr, "oma-sandbox egress relay: %v\n", err)
	return 126
}
