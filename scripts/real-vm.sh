#!/usr/bin/env bash
# Runs the real-VM suite: the project's tests that need a booting msb
# microVM (e2e/realmsb, and the tools' shared suite on the real-msb and
# real-msb-channel backends), against the pinned real msb (.tools/msb) and
# the guest image `make image` builds (bin/sandbox-image.tar).
#
# Where `msb doctor` passes on this host, the tests run here. Elsewhere (a
# /dev/kvm that cannot boot libkrun's VMs, or none) they run inside an
# outer guest, L1: Debian's stock kernel under QEMU's software emulation
# with `-cpu max`, whose AMD SVM with nested paging gives L1 a /dev/kvm on
# which msb boots its microVMs. Nothing there uses the host's /dev/kvm.
#
# Usage: real-vm.sh [-run REGEXP]   (as root on Debian amd64 for the L1 path)
# Environment:
#   OMA_VM_DIR     where L1's root file system is kept between runs, and
#                  built again when its package list changes (default
#                  oma-sandbox/real-vm under the user's cache directory)
#   OMA_VM_MEM     each L1's memory (default 6G)
#   OMA_VM_TIMEOUT seconds L1 may run, all its boots together, before it is
#                  killed (default 3600: a lane's part took up to 2,813 s
#                  in a green run on a 2-core host, and a chunk that fails
#                  runs again; with make check, inside CI's 90 minutes)
#   OMA_VM_BOOTS   how many times L1 may be booted to finish the suite (20)
#   OMA_VM_SILENCE seconds L1's console may stay silent (it beats every 30)
#                  before L1 is taken for frozen, killed and booted again (300)
#   OMA_VM_DIRECT  1: run here even where msb doctor fails (to see it fail)
# The last line is "real-vm: N passed, N failed, N skipped"; the exit status
# is 0 only when every test binary passed and at least one test ran.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"

run_filter=
case ${1:-} in
  -run) run_filter=${2:?-run needs a regular expression} ;;
  "") ;;
  *) echo "usage: $0 [-run REGEXP]" >&2; exit 2 ;;
esac

vm_dir=${OMA_VM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/oma-sandbox/real-vm}
vm_mem=${OMA_VM_MEM:-6G}
vm_timeout=${OMA_VM_TIMEOUT:-3600}
msb=$root/.tools/msb/bin/msb
# Debian 13's kernel (6.12) in L1: 6.1's (Debian 12) dies within minutes
# under two microVMs at once (a stack guard page hit in msb's vCPU thread).
suite=trixie

say() { echo "real-vm: $*"; }
die() { echo "real-vm: $*" >&2; exit 1; }
elapsed() { echo "$(($(date +%s) - $1)) s"; }

./scripts/deps.sh
[ -x "$msb" ] || die "the real msb is not installed in .tools/msb (it ships for Linux x86_64 only)"

# The guest image, written (not loaded: every test loads it into its own
# MSB_HOME) when missing.
if [ ! -f bin/sandbox-image.tar ]; then
  t=$(date +%s)
  OMA_IMAGE_NOLOAD=1 ./scripts/build-image.sh
  say "guest image built in $(elapsed "$t")"
fi

# The suite: a directory holding a module-shaped tree (go.mod, .tools/msb,
# bin/sandbox-image.tar, each package's test binary and testdata) and
# run-suite.sh, which runs it the same way here and in L1.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
suite_dir=$work/oma
t=$(date +%s)
make --no-print-directory agent >/dev/null
OMA_SUITE_RUN=${run_filter:-${OMA_SUITE_RUN:-}} ./scripts/real-vm-suite.sh build "$suite_dir"
say "test binaries built in $(elapsed "$t")"

if "$msb" doctor >/dev/null 2>&1 || [ "${OMA_VM_DIRECT:-}" = 1 ]; then
  say "msb doctor passes on this host: running the suite here"
  "$suite_dir/run-suite.sh" 2>&1 | tee "$work/suite.log"
  summary=$(grep -a '^real-vm: [0-9]* passed' "$work/suite.log" | tail -1)
  echo "$summary"
  grep -aq '^real-vm: suite ok' "$work/suite.log"
  exit
fi

# ---- L1: an outer guest under QEMU's software emulation --------------------
[ "$(id -u)" -eq 0 ] || die "msb doctor fails here and an outer guest needs root (mmdebstrap, qemu): run as root"
[ "$(uname -m)" = x86_64 ] || die "msb doctor fails here and the outer guest is built for x86_64 only"
say "msb doctor fails on this host ($("$msb" doctor 2>&1 | sed -n 's/^.*error: //p' | head -1)): running the suite in an outer guest under QEMU's software emulation"

missing=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# L1's root file system: Debian minbase with its stock kernel, kept in
# vm_dir and built again when the package list below changes.
l1_packages=linux-image-amd64,kmod,procps,iproute2,libcap-ng0,ca-certificates
stamp="$suite $l1_packages"
rootfs=$vm_dir/rootfs
if [ "$(cat "$vm_dir/stamp" 2>/dev/null)" != "$stamp" ]; then
  t=$(date +%s)
  rm -rf "$vm_dir"
  mkdir -p "$vm_dir"
  mmdebstrap --quiet --mode=root --variant=minbase --include="$l1_packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$suite" "$rootfs"
  echo "$stamp" >"$vm_dir/stamp"
  say "L1 root file system built in $(elapsed "$t")"
fi
kernel=$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$rootfs"/boot/initrd.img-* | sort -V | tail -1)

rm -rf "$rootfs/opt/oma"
cp -a "$suite_dir" "$rootfs/opt/oma"
install -m 0755 scripts/real-vm-init.sh "$rootfs/sbin/oma-vm-init"

# One L1 per lane, each with one vCPU, side by side on the host's cores:
# an L1 of two vCPUs both busy with microVMs (QEMU's multi-threaded
# emulation) panicked or reset within minutes. Each gets its own disk: L1's
# files plus room for msb's images, sandboxes and volumes; the suite's logs
# come back on it (L1 writes them under /opt/oma/results).
mb=$(du -sm "$rootfs" | cut -f1)
for lane in 1 2; do
  truncate -s $(((mb + 6144) * 1024 * 1024)) "$work/l1-$lane.img"
  mkfs.ext4 -q -F -L l1root -d "$rootfs" "$work/l1-$lane.img"
done
rm -rf "$rootfs/opt/oma"

# The console lines shown as they come: the suite's, and the kernel's
# signs of trouble (loglevel=4 lets its errors through: a panic, a lockup,
# a stall, a task blocked for minutes, the OOM killer).
shown='^real-vm\|Kernel panic\|BUG: \|rcu.*stall\|blocked for more than\|Out of memory'

# watch_l1 PID LOG DEADLINE: watches the qemu PID, run in the background
# by the shell that waits for PID (which kills the watcher once PID ends),
# and kills PID once the clock passes DEADLINE (prints "deadline") or its
# console LOG has been silent for OMA_VM_SILENCE seconds (prints "silent").
# SIGKILL: a frozen guest's qemu is not always in a state to act on SIGTERM.
watch_l1() {
  local pid=$1 log=$2 deadline=$3 silence=${OMA_VM_SILENCE:-300} now
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    now=$(date +%s)
    if [ "$now" -ge "$deadline" ]; then
      kill -KILL "$pid" 2>/dev/null && echo deadline
      return
    fi
    if [ $((now - $(stat -c %Y "$log"))) -ge "$silence" ]; then
      kill -KILL "$pid" 2>/dev/null && echo silent
      return
    fi
  done
}

# boot_lane N: boots the L1 of lane N until its part of the suite has run
# to its end. Nested virtualization under emulation is not steady (seen: a
# kernel panic on a stack guard page hit in msb's vCPU thread, a machine
# reset without a word, an L1 that went silent for the rest of its time),
# so an L1 that stops early, or stops beating, is booted again, up to
# OMA_VM_BOOTS times, and the suite goes on from the first chunk that had
# not finished. Its console goes to console-N.log.
boot_lane() {
  # (Not "local lane=$1 log=...$lane": local expands all its words first.)
  local lane=$1 boot left qemu qemu_rc stopped tailer watcher log=$work/console-$1.log boot_log=$work/boot-$1.log
  : >"$log"
  for boot in $(seq "${OMA_VM_BOOTS:-20}"); do
    left=$((vm_timeout - ($(date +%s) - t)))
    if [ "$left" -le 60 ]; then
      say "lane $lane: no time left for another boot of L1 (OMA_VM_TIMEOUT=$vm_timeout s in all)"
      break
    fi
    # A killed or crashed L1 left its file system as a power cut does.
    [ "$boot" -eq 1 ] || e2fsck -fy "$work/l1-$lane.img" >/dev/null 2>&1 || true
    say "lane $lane: booting L1 (qemu -accel tcg -cpu max, 1 CPU, $vm_mem), boot $boot"
    : >"$boot_log"
    qemu-system-x86_64 -accel tcg,tb-size=1024 -cpu max \
      -smp 1 -m "$vm_mem" -nographic -no-reboot -nodefaults -serial stdio \
      -kernel "$kernel" -initrd "$initrd" \
      -drive file="$work/l1-$lane.img",if=virtio,format=raw,cache=unsafe \
      -append "root=/dev/vda rw init=/sbin/oma-vm-init console=ttyS0 loglevel=4 panic=-1 mitigations=off oma.lane=$lane" \
      </dev/null >"$boot_log" 2>&1 &
    qemu=$!
    tail -n +1 -f --pid="$qemu" "$boot_log" | grep --line-buffered -a "$shown" &
    tailer=$!
    watch_l1 "$qemu" "$boot_log" $(($(date +%s) + left)) >"$work/stopped-$lane" &
    watcher=$!
    set +e
    wait "$qemu" 2>/dev/null # (not bash's word on a job it killed)
    qemu_rc=$?
    set -e
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" "$tailer" 2>/dev/null || true
    stopped=$(cat "$work/stopped-$lane")
    cat "$boot_log" >>"$log"
    case $stopped in
      deadline) qemu_rc=124 ;;
      silent)
        say "lane $lane: L1 was silent for ${OMA_VM_SILENCE:-300} s (no heartbeat): killed; its console's last lines:"
        grep -av '^heartbeat: ' "$boot_log" | tail -8 | tr -d '\r' | sed "s/^/real-vm: lane $lane: | /"
        ;;
    esac
    say "lane $lane: L1 ran for $(elapsed "$t") since the first boot (qemu exit $qemu_rc)"
    if grep -aq '^real-vm: [0-9]* passed' "$boot_log" || [ "$qemu_rc" = 124 ]; then
      break
    fi
    say "lane $lane: L1 stopped before its part of the suite ended$(grep -aq 'Kernel panic' "$boot_log" && echo ': its kernel panicked')"
  done
}
t=$(date +%s)
boot_lane 1 &
boot_lane 2 &
wait

# The logs, out of the disks without mounting them, and the sums.
logs=${OMA_VM_LOGS:-$root/bin/real-vm-logs}
rm -rf "$logs"
mkdir -p "$logs"
ok=1 passed=0 failed=0 skipped=0 unfinished=()
for lane in 1 2; do
  e2fsck -fy "$work/l1-$lane.img" >/dev/null 2>&1 || true # replays the journal of a kernel that died
  # Each lane's logs into a directory of their own first: debugfs's rdump
  # does not write into a directory that exists.
  mkdir -p "$logs/lane-$lane"
  debugfs -R "rdump /opt/oma/results $logs/lane-$lane" "$work/l1-$lane.img" >/dev/null 2>&1 || true
  mkdir -p "$logs/results"
  cp -a "$logs/lane-$lane/results/." "$logs/results/" 2>/dev/null || true
  rm -rf "$logs/lane-$lane"
  cp "$work/console-$lane.log" "$logs/" # every boot's whole console, the kernel's words and the heartbeats
  summary=$( (grep -a '^real-vm: [0-9]* passed' "$work/console-$lane.log" || true) | tail -1 | tr -d '\r')
  if [ -z "$summary" ]; then
    ok=0 failed=$((failed + 1))
    unfinished+=("$lane")
    say "lane $lane: the suite did not run to its end"
    continue
  fi
  read -r p f s <<<"$(sed 's/^real-vm: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped.*/\1 \2 \3/' <<<"$summary")"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  grep -aq '^real-vm: suite ok' "$work/console-$lane.log" || ok=0
done
say "logs of each test binary: $logs/results"
if [ "$ok" != 1 ]; then
  for f in "$logs"/results/*.log; do
    [ -f "$f" ] || continue
    grep -aq -- '--- FAIL\|^panic' "$f" || continue
    echo "----- $f (failures)"
    grep -a -B2 -A20 -- '--- FAIL\|^panic' "$f" | head -200 || true
  done
fi
# Last, where a reader of the output's end sees them: what an unfinished
# lane was doing when it stopped (its boots, the line it was running).
for lane in "${unfinished[@]}"; do
  echo "----- lane $lane's last lines (console-$lane.log)"
  grep -a "$shown" "$work/console-$lane.log" | grep -av ': --- PASS' | tail -25 | tr -d '\r' || true
done
echo "real-vm: $passed passed, $failed failed, $skipped skipped"
[ "$ok" = 1 ]
