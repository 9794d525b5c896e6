#!/bin/bash
# PID 1 of an outer guest scripts/real-vm.sh boots: loads kvm_amd (QEMU's
# -cpu max offers SVM with nested paging), runs its lane of the real-VM
# suite in /opt/oma (oma.lane= on the kernel command line) with its output
# on the console, and powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root NO_COLOR=1 LANG=C.UTF-8
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -o remount,rw /
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
# TMPDIR stays on the ext4 root: msb keeps its trampoline root file system
# under it and needs user.* xattrs there, which tmpfs lacks before Linux 6.6.
chmod 1777 /tmp
export TMPDIR=/tmp
ip link set lo up
# msb gives its guest an IPv4 address (and so the host alias) only where
# the host can route IPv4: L1 has no network card, so a dummy interface
# with a default route stands in for one. Nothing leaves through it.
modprobe dummy && ip link add oma0 type dummy && ip link set oma0 up && ip route add default dev oma0
hostname oma-l1

main() {
  echo "real-vm: L1 up after $(cut -d' ' -f1 /proc/uptime) s, kernel $(uname -r)"
  if ! modprobe kvm_amd nested=1 || [ ! -c /dev/kvm ]; then
    echo "real-vm: L1 has no /dev/kvm (modprobe kvm_amd failed)"
    return
  fi
  # What the suite wrote reaches the disk every few seconds: should L1's
  # kernel die, the host reads the logs so far and boots L1 again to run
  # what is left.
  (while sleep 5; do sync; done) >/dev/null 2>&1 &
  local syncer=$!
  # A heartbeat on the console, past the pipe below: the host kills an L1
  # that stops beating (a kernel that froze, or thrashes) and boots it
  # again, rather than waiting out the lane's whole time.
  (while sleep 30; do
    echo "heartbeat: up $(cut -d' ' -f1 /proc/uptime) s, load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -h MemAvailable /proc/meminfo | tr -s ' ')" >/dev/console
  done) 2>/dev/null &
  local beat=$!
  lane=$(sed -n 's/.*oma\.lane=\([0-9]*\).*/\1/p' /proc/cmdline)
  /opt/oma/run-suite.sh run "$lane"
  kill "$syncer" "$beat"
}
# Through a pipe, not the serial tty: msb draws no spinners then. The
# reader stops at main's last line, not at the pipe's end: a process the
# suite left behind (a daemon of msb's) may hold the pipe open for ever.
{ main; echo "real-vm: L1 done"; } 2>&1 | sed -u '/^real-vm: L1 done$/q' >/dev/console
sync
echo o >/proc/sysrq-trigger
sleep 30
