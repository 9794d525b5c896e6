package guestagent

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// commandsCgroup is the cgroup.procs file of the group every call's
// command starts in (serve --commands-cgroup-fd), where a local session's
// process limit binds: the agent itself stays outside it, so a command
// that used the limit up leaves the agent its threads. Nil when the agent
// was given none.
var commandsCgroup *os.File

// moveToCommands moves the process pid into commandsCgroup, if the agent
// has one; the bash supervisor's command, which reads its text from
// stdin before it runs anything, is moved so before it is given the text,
// without joinCommands' shell. The kernel checks the descriptor's opener,
// the host, not the agent (Linux 5.16 and later).
func moveToCommands(pid int) error {
	if commandsCgroup == nil {
		return nil
	}
	if _, err := commandsCgroup.WriteString(strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("cannot join the session's process limit: %w", err)
	}
	return nil
}

// joinCommands makes cmd enter commandsCgroup before its program runs: a
// shell writes its own pid there, closes the descriptor, and only then
// executes the program (cmd.Path, with cmd.Args after the first), so
// nothing the command starts runs outside the group; a shell that cannot
// join exits 125 and runs nothing.
func joinCommands(cmd *exec.Cmd) {
	if commandsCgroup == nil {
		return
	}
	fd := strconv.Itoa(3 + len(cmd.ExtraFiles))
	cmd.ExtraFiles = append(cmd.ExtraFiles, commandsCgroup)
	shim := `echo $$ >&` + fd + ` || { echo "oma-sandbox: cannot join the session's process limit" >&2; exit 125; }
exec ` + fd + `>&-
exec "$@"`
	cmd.Args = append([]string{"/bin/sh", "-c", shim, "oma-join", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
}
