#!/usr/bin/env bash
# Captures what the real msb answers once a microVM boots, for the cases
# where fakemsb stands in for it: exec's exit codes, signals, stdin and its
# end, --stream, --timeout, --user and --workdir; copy both ways; stop,
# start and a stopped sandbox's exec; metrics. Like scripts/capture-msb.sh
# (the cases before a boot), each case NAME writes NAME.argv, NAME.stdin,
# NAME.stdout, NAME.stderr and NAME.exit, and "cases" lists them in order
# with "fake" (fakemsb must answer the same) or "real" (only a VM can).
#
#   capture-msb-vm.sh MSB IMAGE-ARCHIVE OUT
#
# It needs a host where msb boots VMs: scripts/real-vm.sh runs it in the
# real-VM suite, and the answers come back in bin/real-vm-logs; copied to
# msb/testdata/real-0.6.18-vm, fakemsb's TestMatchesRealVM replays them.
set -euo pipefail
msb=${1:?usage: capture-msb-vm.sh MSB IMAGE-ARCHIVE OUT}
archive=${2:?usage: capture-msb-vm.sh MSB IMAGE-ARCHIVE OUT}
out=${3:?usage: capture-msb-vm.sh MSB IMAGE-ARCHIVE OUT}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MSB_HOME=$work/home NO_COLOR=1
mkdir -p "$work/scratch" "$out"
rm -f "$out"/*
echo "capture" >"$work/scratch/in.txt"

normalise() { sed -e "s|$MSB_HOME|\$MSB_HOME|g" -e "s|$work/scratch|\$WORK|g"; }

# capture NAME fake|real STDIN ARGS...: runs msb ARGS with STDIN (a file,
# or - for none) and records what it did.
capture() {
  local name=$1 compare=$2 stdin=$3 code=0
  shift 3
  printf '%s\n' "$@" | normalise >"$out/$name.argv"
  if [ "$stdin" = - ]; then stdin=/dev/null; fi
  cp "$stdin" "$out/$name.stdin"
  "$msb" "$@" >"$work/stdout" 2>"$work/stderr" <"$stdin" || code=$?
  normalise <"$work/stdout" >"$out/$name.stdout"
  normalise <"$work/stderr" >"$out/$name.stderr"
  echo "$code" >"$out/$name.exit"
  printf '%s %s\n' "$name" "$compare" >>"$out/cases"
  echo "capture-msb-vm: $name: exit $code"
}

# pause SECONDS: waits between two cases, and says so in the list, so that
# a replay waits as long before the next.
pause() {
  sleep "$1"
  printf 'pause %s\n' "$1" >>"$out/cases"
}

"$msb" load --quiet --tag capture/vm:1 --input "$archive"
printf 'line one\nline two' >"$work/stdin.txt"

capture create real - create capture/vm:1 --name capvm --pull never --quiet
if [ "$(cat "$out/create.exit")" != 0 ]; then
  echo "capture-msb-vm: no microVM booted: $(cat "$out/create.stderr")" >&2
  exit 1
fi
# Exit codes, and the two streams apart.
capture exec-true fake - exec capvm -- true
capture exec-exit fake - exec capvm -- /bin/sh -c 'echo out; echo err >&2; exit 3'
capture exec-exit-255 fake - exec capvm -- /bin/sh -c 'exit 255'
# A command killed by a signal: msb reports 128 + the signal.
capture exec-signal-term fake - exec capvm -- /bin/sh -c 'kill -TERM $$'
capture exec-signal-kill fake - exec capvm -- /bin/sh -c 'kill -KILL $$'
capture exec-missing-program fake - exec capvm -- /nonexistent
capture exec-missing-workdir fake - exec --workdir /nonexistent capvm -- pwd
capture exec-workdir fake - exec --workdir /tmp capvm -- pwd
capture exec-user fake - exec --user 65534 capvm -- /bin/sh -c 'id -u; id -g'
capture exec-user-root fake - exec --user 0 capvm -- id -u
# stdin: read to its end, with and without --stream; a command that never
# reads it still ends.
capture exec-stdin fake "$work/stdin.txt" exec capvm -- /bin/sh -c 'cat; echo; echo read-all'
capture exec-stream-stdin fake "$work/stdin.txt" exec --stream capvm -- /bin/sh -c 'cat; echo; echo read-all; echo err >&2; exit 5'
capture exec-stream-stdin-eof fake - exec --stream capvm -- /bin/sh -c 'cat >/dev/null; echo eof-seen'
capture exec-stream-unread-stdin fake "$work/stdin.txt" exec --stream capvm -- echo never-read
# --timeout: the command is killed, and msb says so.
capture exec-timeout fake - exec --timeout 1s capvm -- sleep 30
capture exec-stream-timeout fake - exec --stream --timeout 1s capvm -- /bin/sh -c 'echo started; sleep 30'
capture exec-timeout-not-reached fake - exec --timeout 30s capvm -- echo in-time
# A process the command leaves running: in its own session or not, with
# its output on the exec's pipes or elsewhere. Does it outlive the exec?
capture exec-leaves-background fake - exec capvm -- /bin/sh -c '(sleep 3; echo kept >/tmp/bg-plain) >/dev/null 2>&1 </dev/null & echo started'
capture exec-leaves-setsid fake - exec capvm -- /bin/sh -c 'setsid /bin/sh -c "sleep 3; echo kept >/tmp/bg-setsid" >/dev/null 2>&1 </dev/null & echo started'
capture exec-leaves-on-pipe fake - exec capvm -- /bin/sh -c '(sleep 3; echo kept >/tmp/bg-pipe; echo late) & echo started'
pause 8
capture exec-background-survivors fake - exec capvm -- /bin/sh -c 'for f in plain setsid pipe; do printf "%s: " $f; cat /tmp/bg-$f 2>/dev/null || echo gone; done'
# copy, both ways; a missing guest file.
capture copy-in fake - copy "$work/scratch/in.txt" capvm:/tmp/in.txt
capture copy-in-read fake - exec capvm -- /bin/sh -c 'cat /tmp/in.txt; stat -c "%u %g %a" /tmp/in.txt'
capture copy-out fake - copy capvm:/tmp/in.txt "$work/scratch/out.txt"
cp "$work/scratch/out.txt" "$out/copy-out.file"
capture copy-out-missing fake - copy capvm:/nonexistent "$work/scratch/none.txt"
# metrics of a running sandbox: its keys (values vary).
capture metrics real - metrics capvm --format json
# stop, a stopped sandbox's exec and metrics, start.
capture stop fake - stop capvm
capture stop-again fake - stop capvm
capture list-stopped real - list --format json
capture exec-stopped fake - exec capvm -- echo after-stop
capture stop-after-exec fake - stop capvm
capture start fake - start capvm
capture start-running fake - start capvm
capture exec-started fake - exec capvm -- echo started-again
capture remove-running fake - remove capvm
capture remove-forced fake - remove --force capvm
capture list-after-remove fake - list --format json
echo "capture-msb-vm: cases in $out"
