// Package bashproto is the guest protocol of the bash tool: the supervisor
// script that runs a command under an in-guest timer with its output in a
// log file, relays that log live between two sentinel lines, and kills
// the command's whole process tree on a timeout or on request; the script
// that makes that request from a second exec; and the host-side filter and
// tail that strip the sentinels, judge how the command ended and keep only
// what the result shows.
//
// Scripts are returned as (script, args) for `/bin/bash -c SCRIPT NAME ARGS...`.
// Nothing secret and nothing the command says travels in argv or in the
// environment, where every process of the session could read it: the
// command text and the call's secret go on the supervisor's stdin.
package bashproto

import (
	"crypto/rand"
	"encoding/hex"
	"path"
	"strconv"
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

// SupervisorName is $0 of the supervisor; the kill script finds it by that
// and the call id that follows.
const SupervisorName = "oma-bash-supervisor"

// CommandReader is the program of the command's bash (`/bin/bash -c
// CommandReader bash`) under the perl supervisor and the agent's builtin:
// it reads the command text from its stdin to the end, puts /dev/null in
// its place and runs the text, so the text is in no argv.
const CommandReader = `IFS= read -r -d "" __oma_command; exec </dev/null; eval "unset __oma_command; $__oma_command"`

// Call is one bash run. ID is public: it names the log and tags the
// command's processes. Secret authenticates the sentinel lines: it reaches
// the guest only on the supervisor's stdin, so the command cannot print a
// record the host believes.
type Call struct {
	ID     string
	Secret string
}

// NewCall returns a call with a fresh random id and secret, 32 lowercase
// hex digits each.
func NewCall() Call {
	return Call{ID: randomHex(), Secret: randomHex()}
}

func randomHex() string {
	var b [16]byte
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

// supervisorScript runs in two stages. The first picks the supervisor:
// where perl exists (and the guest's architecture is known) it execs
// perlSupervisor, which does all that follows in one process; otherwise
// the shell supervisor below, which this comment describes, in two
// stages. The first leaves the caller's process group and session
// (setsid), so a host that kills msb's exec with its group does not take
// the supervisor along before it has killed the command. Without perl it
// is no child subreaper, so a process that double-forks out of the
// command's tree before a tick records it is reparented to init and
// escapes the tree walk (the perl supervisor is one: such a process is
// reparented to it).
//
// The second stage reads the secret (one line) and the command (the rest)
// from stdin, creates the log, prints the dispatch line and starts the
// command as the leader of its own session with stdin /dev/null and stdout
// and stderr appended to the log. The command text reaches that bash on
// fd 3, which it closes before evaluating it. `tail --pid` relays the log
// (the file the supervisor created, through its descriptor: never the
// path, where the command may have put a FIFO) to stdout as it grows and
// exits once the command has ended and the log is drained; background
// processes keep appending to the log and never hold the exec's output, so
// the exec ends with the command and its status is the real wait's.
//
// Every tenth of a second the supervisor records the command's process
// tree (pids with their start times, so a reused pid is never taken for
// one of ours). On the timeout, or on SIGUSR1 from the kill script, it
// stops every process it can attribute to the command, again until no new
// one appears (so nothing forks away between the scan and the kill), then
// SIGKILLs them: the tree below the command and below every recorded
// process, the command's session and process group, and every process
// tagged with OwnerEnv. After a normal end nothing is killed.
//
// At the end it prints the terminal record: `exit:N`, or `timeout:137`.
const supervisorScript = `set -u
if [ "$0" != ` + SupervisorName + ` ]; then
  case ${HOSTTYPE-} in x86_64) nr='112 157 228' ;; aarch64) nr='157 167 113' ;; *) nr= ;; esac
  if [ -n "$nr" ] && command -v perl >/dev/null 2>&1; then
    exec perl -e '` + perlSupervisor + `' ` + SupervisorName + ` "$@" $nr
  fi
  exec setsid -w /bin/bash -c "$BASH_EXECUTION_STRING" ` + SupervisorName + ` "$@"
fi
id=$1 secs=$2 logdir=$3 keptdir=$4 maxlines=$5 maxbytes=$6 background=$7
secret=
IFS= read -r secret || :
command=
IFS= read -r -d '' command || :
case $secret in
  '' | *[!0-9a-f]*) printf 'oma-sandbox: malformed bash request\n' >&2; exit 91 ;;
esac
log=$logdir/$id.log
# fd 4 keeps the log itself: the command may put anything at its path.
if ! { { [ -d "$logdir" ] || mkdir -p -m 700 -- "$logdir"; } && : > "$log" && exec 4< "$log"; } 2>/dev/null; then
  printf 'oma-sandbox: cannot create the output log %s\n' "$log" >&2
  exit 92
fi
printf '__OMA_DISPATCHED__:%s\n' "$secret"
` + OwnerEnv + `="$id" setsid /bin/bash -c \
  'IFS= read -r -d "" __oma_command <&3; exec 3<&-; eval "unset __oma_command; $__oma_command"' \
  bash 3<<<"$command" 4<&- </dev/null >>"$log" 2>&1 &
pid=$!
command=
tail ---disable-inotify -c +1 -s 0.01 -f --pid="$pid" -- /proc/self/fd/4 </dev/null 2>/dev/null &
follower=$!

tick=
declare -A seen=() found=() K=() T=() G=() S=()
# scan reads every process's parent, group, session and start time.
scan() {
  K=() T=() G=() S=()
  local f line p
  local -a a
  for f in /proc/[1-9]*/stat; do
    { IFS= read -r line < "$f"; } 2>/dev/null || continue
    p=${f#/proc/}; p=${p%/stat}
    a=(${line##*) })
    [ "${a[0]}" = Z ] && continue
    K[${a[1]}]+=" $p"; G[$p]=${a[2]}; S[$p]=${a[3]}; T[$p]=${a[19]}
  done
}
# tree adds the live processes at and below the given roots to found.
tree() {
  local -a q=("$@")
  local p c
  while [ "${#q[@]}" -gt 0 ]; do
    p=${q[0]}; q=("${q[@]:1}")
    case $p in 1 | $$ | $follower) continue ;; esac
    [ -n "${T[$p]-}" ] && [ -z "${found[$p]-}" ] || continue
    found[$p]=${T[$p]}
    for c in ${K[$p]-}; do q+=("$c"); done
  done
}
# roots are the command and every recorded process still alive.
roots() {
  local p
  r=("$pid")
  for p in "${!seen[@]}"; do
    [ "${T[$p]-}" = "${seen[$p]}" ] && r+=("$p")
  done
}
track() {
  scan; found=(); roots; tree "${r[@]}"
  seen=()
  local p
  for p in "${!found[@]}"; do seen[$p]=${found[$p]}; done
}
killtree() {
  local f p n i
  local -A stopped=()
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    scan; found=(); roots
    for p in "${!G[@]}"; do
      if [ "${G[$p]}" = "$pid" ] || [ "${S[$p]}" = "$pid" ]; then r+=("$p"); fi
    done
    for f in $(grep -lzx -- "` + OwnerEnv + `=$id" /proc/[1-9]*/environ 2>/dev/null); do
      p=${f#/proc/}; r+=("${p%/environ}")
    done
    tree "${r[@]}"
    n=0
    for p in "${!found[@]}"; do
      [ -n "${stopped[$p]-}" ] && continue
      kill -STOP "$p" 2>/dev/null
      stopped[$p]=1 n=$((n + 1))
    done
    [ "$n" -eq 0 ] && break
  done
  [ "${#stopped[@]}" -gt 0 ] && kill -KILL "${!stopped[@]}" 2>/dev/null
}

deadline=$((10#${EPOCHREALTIME/[.,]/} + secs * 1000000))
kind=exit status=137 aborted=
trap 'aborted=1' USR1
while :; do
  sleep 0.1 </dev/null >/dev/null 2>&1 &
  tick=$!
  # Starting a job can drop a finished one from bash's table, and wait -n
  # would then not see it: a plain wait still has its saved status.
  if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; status=$?; break; fi
  ended=
  wait -n -p ended "$pid" "$tick" 2>/dev/null
  rc=$?
  if [ "${ended-}" = "$pid" ]; then status=$rc; break; fi
  if [ -n "$aborted" ]; then killtree; break; fi
  track
  if [ "$((10#${EPOCHREALTIME/[.,]/}))" -ge "$deadline" ]; then kind=timeout; killtree; break; fi
done
# The command is reaped (to tail --pid a zombie is alive). tail ends within
# its 0.01 s poll (polling, not inotify: closing an inotify instance waits
# for an RCU grace period, which costs more than the poll). The loop's last
# tick bounds the first wait for it, fifty more the rest, for a tail
# blocked on a host that does not read; a wait for a job bash no longer
# knows (127) uses a tick up.
[ "${ended-}" = "$tick" ] && tick=
wait "$pid" 2>/dev/null
n=0
while kill -0 "$follower" 2>/dev/null; do
  if [ -z "$tick" ]; then
    [ "$n" -lt 50 ] || break
    sleep 0.1 </dev/null >/dev/null 2>&1 &
    tick=$! n=$((n + 1))
  fi
  ended=
  wait -n -p ended "$follower" "$tick" 2>/dev/null
  rc=$?
  if [ "${ended-}" = "$tick" ] || [ "$rc" -eq 127 ]; then tick=; fi
done
kill "$tick" "$follower" 2>/dev/null
wait "$tick" "$follower" 2>/dev/null
tick=
# A log read to its end in fewer bytes than both limits allow (no NUL, which
# would end the read early; a signal ends it with another status) is short:
# no wc needed.
short=$(( maxlines - 1 < maxbytes / 8 ? maxlines - 1 : maxbytes / 8 )) rc=0 head=
if [ "$short" -gt 0 ]; then
  { IFS= read -r -d '' -n "$short" head < /proc/self/fd/4; } 2>/dev/null
  rc=$?
fi
if [ "$rc" -eq 1 ] && [ "${#head}" -lt "$short" ]; then
  set -- 0 0
else
  set -- $(wc -lc < /proc/self/fd/4 2>/dev/null || echo 0 0)
fi
head=
if [ "$(( ${1:-0} + 1 ))" -gt "$maxlines" ] || [ "${2:-0}" -gt "$maxbytes" ]; then
  # Exclusive: a FIFO or a symlink planted at the copy's name fails the
  # copy instead of being opened or followed.
  if ! { mkdir -p -- "$keptdir" &&
    dd if=/proc/self/fd/4 of="$keptdir/$id.log" conv=excl bs=1M status=none; } 2>/dev/null; then
    printf '\n[The full output could not be saved to %s]\n' "$keptdir/$id.log"
  fi
fi
track
if [ "${#seen[@]}" -gt 0 ] && [ "$background" = end ]; then
  killtree
  printf '\n[Background processes were killed: on this sandbox nothing outlives the call]\n'
  rm -f -- "$log"
elif [ "${#seen[@]}" -gt 0 ]; then
  printf '\n[Background processes are still running; their output goes to %s]\n' "$log"
else
  rm -f -- "$log"
fi
printf '__OMA_TERMINAL__:%s:%s:%s\n' "$secret" "$kind" "$status"
exit "$status"
`

// Script runs command through the supervisor with an in-guest timeout and
// its log in logs.Live (a copy in logs.Kept when the output exceeds l). The supervisor's stdout carries, in order: the line
// `__OMA_DISPATCHED__:<secret>`, the command's stdout and stderr as written
// to the log, and the line `__OMA_TERMINAL__:<secret>:exit:<code>` or
// `__OMA_TERMINAL__:<secret>:timeout:137`; it exits with the same status.
// The returned stdin must be given to the script: it carries the secret
// and the command. The timeout is rounded up to whole seconds (see
// TimeoutSeconds) so a timeout report names what was enforced.
func Script(c Call, command string, timeout time.Duration, logs Logs, l Limits) (script string, args []string, stdin []byte) {
	args = []string{c.ID, strconv.FormatInt(TimeoutSeconds(timeout), 10), logs.Live, logs.Kept,
		strconv.Itoa(l.MaxLines), strconv.Itoa(l.MaxBytes), "keep"}
	if l.EndBackground {
		args[len(args)-1] = "end"
	}
	return supervisorScript, args, []byte(c.Secret + "\n" + command)
}

// TimeoutSeconds is the whole number of seconds Script arms its timer for:
// timeout rounded up, at least one.
func TimeoutSeconds(timeout time.Duration) int64 {
	secs := int64((timeout + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// killScript asks the supervisors of a call (normally one) to kill their
// command's tree, by SIGUSR1, and waits up to about five seconds for them to
// be gone; it exits 1 if one outlives that. With no supervisor left (it was
// killed), it stops and kills what still carries the call's OwnerEnv tag.
// Its pauses are timed reads on a pipe nobody writes.
const killScript = `set -u
id=$1
exec 3<> <(:)
pause() { read -r -t 0.05 -u 3 _ 2>/dev/null || [ $? -gt 128 ] || sleep 0.05; }
sups=()
for f in /proc/[1-9]*/cmdline; do
  p=${f#/proc/}; p=${p%/cmdline}
  [ "$p" = "$$" ] && continue
  argv=()
  { mapfile -d '' -t argv < "$f"; } 2>/dev/null || continue
  if [ "${argv[3]-}" = ` + SupervisorName + ` ] && [ "${argv[4]-}" = "$id" ]; then sups+=("$p"); fi
done
if [ "${#sups[@]}" -gt 0 ]; then
  kill -USR1 "${sups[@]}" 2>/dev/null
  for i in $(seq 100); do
    kill -0 "${sups[@]}" 2>/dev/null || exit 0
    pause
  done
  printf 'the supervisor of bash call %s did not end\n' "$id" >&2
  exit 1
fi
for i in 1 2 3 4 5 6 7 8 9 10; do
  tagged=()
  for f in $(grep -lzx -- "` + OwnerEnv + `=$id" /proc/[1-9]*/environ 2>/dev/null); do
    p=${f#/proc/}; tagged+=("${p%/environ}")
  done
  [ "${#tagged[@]}" -eq 0 ] && exit 0
  kill -STOP "${tagged[@]}" 2>/dev/null
  kill -KILL "${tagged[@]}" 2>/dev/null
  pause
done
printf 'processes of bash call %s survived SIGKILL\n' "$id" >&2
exit 1
`

// KillScript kills what a Script run with the same call id left running:
// through its supervisor when there is one, else by the owner tag.
func KillScript(id string) (string, []string) {
	return killScript, []string{id}
}
