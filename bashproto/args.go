// Package bashproto is the guest protocol of the bash tool: the arguments
// and stdin of the guest agent's bash-supervisor builtin, which runs a
// command under an in-guest timer with its output in a log file, relays
// that log live between two sentinel lines, and kills the command's whole
// process tree on a timeout or on request; the arguments of its bash-kill
// builtin, which makes that request from a second call; and the host-side
// filter and tail that strip the sentinels, judge how the command ended and
// keep only what the result shows.
//
// Nothing secret and nothing the command says travels in argv or in the
// environment, where every process of the session could read it: the
// command text and the call's secret go on the supervisor's stdin.
package bashproto

import (
	"crypto/rand"
	"encoding/hex"
	"path"
	"strconv"
	"strings"
	"time"
)

// OwnerEnv tags every process of a command with its call's public id, one
// more way for a kill to find processes that left the command's tree.
const OwnerEnv = "OMA_BASH_OWNER"

// TimeoutExitCode is the exit status of a command killed by the guest timer
// (128 + SIGKILL).
const TimeoutExitCode = 137

// LiveLogDir holds the log of each call while it runs, and afterwards the
// log of a call whose background processes still write to it. It is
// outside the workspace, so no listing or search of the agent's files ever
// shows it.
const LiveLogDir = "/tmp/oma-bash"

// KeptLogDirName is the workspace directory that receives a copy of a
// call's log when the host cut its output, so the agent can read all of it
// with the tools that read workspace files.
const KeptLogDirName = ".bash-output"

// CommandReader is the program of the command's bash under the supervisor
// builtin (ReaderArgv): it reads the command text from its stdin to the
// end, puts /dev/null in its place and runs the text with no positional
// parameter, so the text is in no argv. Its $1 bounds the characters read:
// `read -N` takes a pipe in large reads, where `read -d ""` takes it a byte
// at a time (a system call a byte: see BenchmarkCommandReader).
const CommandReader = `IFS= read -r -N "$1" __oma_command; shift; exec </dev/null; eval "unset __oma_command; $__oma_command"`

// ReaderArgv is the argv of the bash that runs text through CommandReader,
// given text on its stdin: its length in bytes bounds the characters read
// (never fewer than there are), and the stdin's end ends the read.
func ReaderArgv(text string) []string {
	return []string{"/bin/bash", "-c", CommandReader, "bash", strconv.Itoa(len(text))}
}

// StandbyReader is the program of a bash the agent starts ahead of the
// call that will run it (StandbyArgv, docs/guest-agent.md): on its stdin
// it is given a line with the text's length in bytes, then the text,
// which it runs as CommandReader does. Its stdin's end before the line
// ends it, running nothing.
const StandbyReader = `IFS= read -r __oma_length || exit; IFS= read -r -N "$__oma_length" __oma_command; exec </dev/null; eval "unset __oma_length __oma_command; $__oma_command"`

// StandbyArgv is the argv of a bash that runs StandbyReader.
func StandbyArgv() []string { return []string{"/bin/bash", "-c", StandbyReader, "bash"} }

// Call is one bash run. ID is public: it names the log and tags the
// command's processes. Secret authenticates the sentinel lines: it reaches
// the guest only on the supervisor's stdin, so the command cannot print a
// record the host believes. Next, when set, is the ID the caller will give
// its next call: the agent of a local resident sandbox may then start that
// call's bash, tagged and logged as the call's, as this one ends.
type Call struct {
	ID     string
	Secret string
	Next   string
}

// NewCall returns a call with a fresh random id and secret, IDLen
// lowercase hex digits each.
func NewCall() Call {
	return Call{ID: randomHex(), Secret: randomHex()}
}

// IDLen is the length of the id and the secret NewCall makes.
const IDLen = 2 * idBytes

// idBytes are the random bytes an id or a secret holds.
const idBytes = 16

// IsID reports whether s has the form of an id NewCall makes.
func IsID(s string) bool {
	return len(s) == IDLen && strings.Trim(s, "0123456789abcdef") == ""
}

func randomHex() string {
	var b [idBytes]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// LogPath is the guest path of the call's log in dir.
func (c Call) LogPath(dir string) string {
	return path.Join(dir, c.ID+".log")
}

// Logs are where a call's log lives while it runs (Live) and where it is
// copied when the host will cut the output (Kept).
type Logs struct {
	Live string
	Kept string
}

// LogsIn is the usual Logs of a session whose workspace is workspace.
func LogsIn(workspace string) Logs {
	return Logs{Live: LiveLogDir, Kept: path.Join(workspace, KeptLogDirName)}
}

// Limits tell the supervisor when the host will cut the output: a log
// beyond either is copied to Logs.Kept at the end. EndBackground kills what
// the command left running when it ends normally, for backends where
// nothing may outlive a call anyway.
type Limits struct {
	MaxLines      int
	MaxBytes      int
	EndBackground bool
}

// Args gives the arguments and stdin of the guest agent's bash-supervisor
// builtin (agentwire.BuiltinBashSupervisor), which runs command with an
// in-guest timeout and its log in logs.Live (a copy in logs.Kept when the
// output exceeds l). The supervisor's stdout carries, in order: the line
// `__OMA_DISPATCHED__:<secret>`, the command's stdout and stderr as written
// to the log, and the line `__OMA_TERMINAL__:<secret>:exit:<code>` or
// `__OMA_TERMINAL__:<secret>:timeout:137`; it exits with the same status.
// The returned stdin must be given to the builtin: it carries the secret,
// the command and c.Next. The timeout is rounded up to whole seconds (see
// TimeoutSeconds) so a timeout report names what was enforced.
func Args(c Call, command string, timeout time.Duration, logs Logs, l Limits) (args []string, stdin []byte) {
	args = []string{c.ID, strconv.FormatInt(TimeoutSeconds(timeout), 10), logs.Live, logs.Kept,
		strconv.Itoa(l.MaxLines), strconv.Itoa(l.MaxBytes), "keep"}
	if l.EndBackground {
		args[len(args)-1] = "end"
	}
	stdin = []byte(c.Secret + "\n" + command)
	if c.Next != "" {
		// After a NUL, which no command holds: an agent from before
		// standbys reads the command up to it and no further.
		stdin = append(append(stdin, 0), c.Next...)
	}
	return args, stdin
}

// TimeoutSeconds is the whole number of seconds Args arms the timer for:
// timeout rounded up, at least one.
func TimeoutSeconds(timeout time.Duration) int64 {
	secs := int64((timeout + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// KillArgs are the arguments of the guest agent's bash-kill builtin
// (agentwire.BuiltinBashKill), which kills what the supervisor of the call
// with that id left running: it asks the call's supervisor to kill its
// command's tree and waits for it to end, or, with no supervisor left, stops
// and kills what still carries the call's OwnerEnv tag. It exits 1 if
// something outlives that.
func KillArgs(id string) []string { return []string{id} }
