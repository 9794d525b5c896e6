package sessiontest

import (
	"os"
	"os/exec"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/guestagent"
	"github.com/oma-sandbox/oma-sandbox/session"

	// The test program serves as the guest agent when started under its
	// name: the builtins a command names run in it.
	_ "github.com/oma-sandbox/oma-sandbox/guestagent/selfagent"
)

// command is the process that runs cmd: for a builtin, this very program
// started as the guest agent (`oma-guest-agent builtin NAME ARGS...`, see
// package selfagent), else bash.
func command(cmd session.Command) (*exec.Cmd, error) {
	if cmd.Builtin == "" {
		return exec.Command("/bin/bash", append([]string{"-c", cmd.Script, "bash"}, cmd.Args...)...), nil
	}
	c := exec.Command("/proc/self/exe", append([]string{"builtin", cmd.Builtin}, cmd.Args...)...)
	c.Args[0] = guestagent.ProgramName
	// A test program built with -race would otherwise sleep a second on
	// its way out, in every call.
	c.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return c, nil
}
