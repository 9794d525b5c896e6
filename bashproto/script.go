// Package bashproto is the guest protocol of the bash tool: the script that
// runs a command in its own process group under an in-guest timer and
// brackets its output with sentinel lines, the script that kills that group
// from a second exec, and the host-side filter that strips the sentinels
// from the output stream and judges how the command ended.
//
// Scripts are returned as (script, args) for `/bin/bash -c SCRIPT bash ARGS...`:
// the command and every path travel as arguments, never spliced into script
// text.
package bashproto

import (
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// OwnerEnv tags every process of a command with its token, so a cleanup
// can find the ones that left its process group (setsid, daemons).
const OwnerEnv = "OMA_BASH_OWNER"

// TimeoutExitCode is the exit status of a command killed by the guest timer
// (128 + SIGKILL).
const TimeoutExitCode = 137

// runScript prints the dispatch line and only then starts the command, so
// no command output can precede it. The command runs as the leader of a new
// session and process group (a background job of a non-interactive shell is
// never a group leader, so setsid execs in place and $! is the group id);
// its stderr is merged into stdout so the combined output keeps its order.
// Its environment carries OwnerEnv=token, inherited by everything it starts.
// It is not a login shell, so no profile files are read.
//
// $! exists before the child has called setsid, so every kill names the
// process first and then its group: a process killed before setsid never
// forks, and one past it is reached through the group either way.
//
// The timer is a second group with its stdio on /dev/null, so killing its
// group also ends its sleep and it never holds the output stream open. It
// marks the timeout before killing, so the script can tell a timeout from a
// command that died of SIGKILL for other reasons. The timer file is written
// before the pid file: once the pid file exists, both are there to kill.
const runScript = `set -u
pidfile=$1 secs=$2 command=$3 token=$4
timerfile=$pidfile.timer markfile=$pidfile.timeout
rm -f -- "$pidfile" "$timerfile" "$markfile"
printf '__OMA_DISPATCHED__:%s\n' "$token"
setsid env "OMA_BASH_OWNER=$token" /bin/bash -c "$command" </dev/null 2>&1 &
pid=$!
setsid /bin/bash -c 'sleep "$1"; if kill -0 -- "$2" "-$2" 2>/dev/null; then : > "$3"; kill -KILL -- "$2" "-$2" 2>/dev/null; fi' timer "$secs" "$pid" "$markfile" </dev/null >/dev/null 2>&1 &
timer=$!
printf '%s' "$timer" > "$timerfile"
printf '%s' "$pid" > "$pidfile"
wait "$pid"
status=$?
# bash reports a killed background job on stderr whenever it reaps it; the
# timer's end is expected, so nothing after this point speaks there.
exec 2>/dev/null
kill -KILL -- "$timer" "-$timer"
wait "$timer"
kind=exit
if [ -e "$markfile" ]; then kind=timeout status=137; fi
rm -f -- "$pidfile" "$timerfile" "$markfile"
printf '__OMA_TERMINAL__:%s:%s:%s\n' "$token" "$kind" "$status"
exit "$status"
`

// Script runs command with bash in the guest under an in-guest timeout.
// Its stdout carries, in order: the line `__OMA_DISPATCHED__:<token>`, the
// command's stdout and stderr, and the line `__OMA_TERMINAL__:<token>:exit:<code>`
// or `__OMA_TERMINAL__:<token>:timeout:137`; it exits with the same status.
// The command's stdin is /dev/null. Processes it leaves running after a
// normal exit are not killed (and keep the output stream open until they end
// or KillScript runs). The timeout is rounded up to whole seconds (see
// TimeoutSeconds) so that any sleep(1) can arm it and a timeout report names
// what was enforced. pidFile (see
// PidFile) holds the command's process group id while it runs, for
// KillScript; it and its sibling files are removed at the end. token should
// come from NewToken.
func Script(command string, timeout time.Duration, pidFile, token string) (string, []string) {
	secs := strconv.FormatInt(TimeoutSeconds(timeout), 10)
	return runScript, []string{pidFile, secs, command, token}
}

// TimeoutSeconds is the whole number of seconds Script arms its timer for:
// timeout rounded up, at least one.
func TimeoutSeconds(timeout time.Duration) int64 {
	secs := int64((timeout + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// killScript validates the pid files' contents because the command can
// write to them: only a plain decimal above 1 is used, so group 0 (our own)
// or pid 1 is never signalled. It kills the timer
// first so it cannot mark a timeout, then re-sends SIGKILL to the command and
// its group until neither exists (a fork may race the first signal), and
// exits non-zero when they outlive the wait, so the caller knows the guest
// state is unproven. Its pauses are timed reads on a pipe nobody writes, so
// waiting costs no process per step.
const killScript = `set -u
pidfile=$1 timerfile=$1.timer markfile=$1.timeout
valid() { case $1 in ''|*[!0-9]*|0*|1) return 1 ;; esac; }
exec 3<> <(:)
pause() { read -r -t 0.02 -u 3 _ 2>/dev/null || [ $? -gt 128 ] || sleep 0.02; }
i=0
while [ ! -s "$pidfile" ] && [ "$i" -lt 50 ]; do pause; i=$((i + 1)); done
if [ -s "$timerfile" ]; then
  timer=; IFS= read -r timer < "$timerfile" || :
  if valid "$timer"; then kill -KILL -- "$timer" "-$timer" 2>/dev/null; fi
fi
if [ -s "$pidfile" ]; then
  pid=; IFS= read -r pid < "$pidfile" || :
  if valid "$pid"; then
    i=0
    while kill -KILL -- "$pid" "-$pid" 2>/dev/null; do
      if [ "$i" -ge 100 ]; then
        printf 'process group %s survived SIGKILL\n' "$pid" >&2
        exit 1
      fi
      pause
      i=$((i + 1))
    done
  fi
fi
rm -f -- "$pidfile" "$timerfile" "$markfile"
`

// KillScript kills the process group of a command started by Script with the
// same pidFile, and its timer, then removes their files. It waits up to
// about a second for the pid file to appear, in case it races the command's
// start, and up to about two seconds for the group to be gone; it exits 1
// if the group is still there.
func KillScript(pidFile string) (string, []string) {
	return killScript, []string{pidFile}
}

// PidFile is the guest path of the pid file for the bash call id in dir.
// Its sibling files add the suffixes .timer and .timeout.
func PidFile(dir, id string) string {
	return path.Join(dir, ".oma-bash-"+id+".pid")
}

// NewToken returns a fresh random token for Script, NewFilter and PidFile:
// 32 lowercase hex digits.
func NewToken() string {
	return strings.ReplaceAll(uuid.NewString(), "-", "")
}
