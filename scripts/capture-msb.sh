#!/usr/bin/env bash
# Captures what the real msb prints for every pre-boot case oma-sandbox
# relies on, as golden files under msb/testdata/real-VERSION/. msb/ parses
# and classifies them in its tests, and fakemsb's tests replay the same argv
# and compare its answers. Rerun it on a newer msb to see what changed:
#
#   scripts/capture-msb.sh [PATH-TO-MSB]     (default .tools/msb/bin/msb)
#
# It runs in a private MSB_HOME and loads a tiny image (one file, built
# here) as capture/tiny:1, so a create gets as far as booting the VM. On a
# host that cannot boot one, that create fails and leaves a Stopped record,
# which gives the listings, inspect and "already exists" cases their
# records; on a host that boots it, the create-failed case is a success.
#
# Each case NAME writes NAME.argv (one argument a line), NAME.stdout,
# NAME.stderr and NAME.exit; "cases" lists them in order with "fake" when
# fakemsb must answer the same (modulo names, times and paths) or "real"
# when only real msb can (a VM boot, digests). The private home's path is
# written as $MSB_HOME and the scratch directory's as $WORK.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
msb=${1:-$root/.tools/msb/bin/msb}
[ -x "$msb" ] || { echo "capture-msb: no msb at $msb: run scripts/deps.sh" >&2; exit 1; }
version=$("$msb" --version | awk '{print $2}')
out=$root/msb/testdata/real-$version
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MSB_HOME=$work/home NO_COLOR=1
mkdir -p "$work/scratch"
echo "capture" >"$work/scratch/in.txt"

rm -rf "$out"
mkdir -p "$out"

normalise() { sed -e "s|$MSB_HOME|\$MSB_HOME|g" -e "s|$work/scratch|\$WORK|g"; }

# capture NAME fake|real ARGS...: runs msb ARGS and records what it did.
capture() {
  local name=$1 compare=$2
  shift 2
  printf '%s\n' "$@" | normalise >"$out/$name.argv"
  local code=0
  "$msb" "$@" >"$work/stdout" 2>"$work/stderr" </dev/null || code=$?
  normalise <"$work/stdout" >"$out/$name.stdout"
  normalise <"$work/stderr" >"$out/$name.stderr"
  echo "$code" >"$out/$name.exit"
  printf '%s %s\n' "$name" "$compare" >>"$out/cases"
  echo "capture-msb: $name: exit $code"
}

# A one-layer image whose config is the guest image's (user, env, workdir).
image() {
  local dir=$work/image layer config
  mkdir -p "$dir/rootfs/etc" "$dir/archive"
  echo "oma-sandbox capture image" >"$dir/rootfs/etc/motd"
  tar -C "$dir/rootfs" --owner=0 --group=0 --mtime=@0 -cf "$dir/layer.tar" etc
  layer=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"User":"65534:65534","Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","HOME=/workspace","TMPDIR=/workspace"],"WorkingDir":"/workspace"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$layer" >"$dir/config.json"
  config=$(sha256sum "$dir/config.json" | cut -d' ' -f1)
  cp "$dir/layer.tar" "$dir/archive/$layer.tar"
  cp "$dir/config.json" "$dir/archive/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["capture/tiny:1"],"Layers":["%s.tar"]}]' "$config" "$layer" >"$dir/archive/manifest.json"
  tar -C "$dir/archive" -cf "$dir/image.tar" .
  "$msb" load -q -i "$dir/image.tar"
}
image

long=$(printf 'v%.0s' $(seq 129))

# Empty listings.
capture list-empty fake list --format json
capture volume-list-empty fake volume list --format json
# Volumes: create, already exists, newest-first listing, inspect, remove.
capture volume-create fake volume create --name capvol
capture volume-create-exists fake volume create --name capvol
capture volume-create-quiet fake volume create --name capvol2 -q
capture volume-list fake volume list --format json
capture volume-inspect fake volume inspect capvol
capture volume-inspect-missing fake volume inspect nosuchvol
capture volume-remove fake volume remove capvol2
capture volume-remove-missing fake volume remove capvol2
capture volume-remove-missing-quiet fake volume remove -q capvol2
# Volume names: msb's own limit is the file system's, not 128 bytes.
capture volume-create-invalid-name fake volume create --name 'bad name'
capture volume-create-long-name fake volume create --name "$long"
capture volume-remove-long-name fake volume remove -q "$long"
# Sizes.
capture volume-create-invalid-size fake volume create --name capdisk --kind disk --size 1Gi
capture volume-create-size-needs-disk fake volume create --name capdisk --size 64M
capture volume-create-disk-needs-size fake volume create --name capdisk --kind disk
# create's validation, before any image is resolved.
capture create-invalid-name fake create capture/tiny:1 --name 'bad name' --pull never
capture create-invalid-memory fake create capture/tiny:1 --name capbox --memory 1Gi --pull never
capture create-invalid-duration fake create capture/tiny:1 --name capbox --max-duration 1d --pull never
capture create-reserved-label fake create capture/tiny:1 --name capbox --label sandbox.x=1 --pull never
capture create-uncached-image fake create capture/missing:1 --name capbox --pull never
# --copy-file: msb checks the spec and stats SRC before the name and the image.
capture create-copy-file-missing fake create capture/tiny:1 --name capbox --pull never --copy-file "$work/scratch/nosuch:/x"
capture create-copy-file-bad-spec fake create capture/tiny:1 --name capbox --pull never --copy-file "$work/scratch/in.txt"
capture create-copy-file-relative-dst fake create capture/tiny:1 --name capbox --pull never --copy-file "$work/scratch/in.txt:x"
capture create-copy-file-empty-src fake create capture/tiny:1 --name capbox --pull never --copy-file ":/x"
capture create-copy-file-dir fake create capture/tiny:1 --name capbox --pull never --copy-file "$work/scratch:/x"
capture create-copy-file-before-name fake create capture/tiny:1 --name 'bad name' --pull never --copy-file "$work/scratch/nosuch:/x"
capture image-inspect-missing fake image inspect capture/missing:1 --format json
capture image-inspect real image inspect capture/tiny:1 --format json
# Commands on a sandbox that does not exist.
capture inspect-missing fake inspect capbox --format json
capture remove-missing fake remove capbox
capture remove-missing-quiet fake remove -q capbox
capture stop-missing fake stop capbox
capture start-missing fake start capbox
capture metrics-missing fake metrics capbox --format json
capture exec-missing fake exec capbox -- true
capture exec-invalid-timeout fake exec --timeout 1d capbox -- true
capture copy-from-missing fake copy capbox:/etc/motd "$work/scratch/out.txt"
capture copy-to-missing fake copy "$work/scratch/in.txt" capbox:/tmp/in.txt
# clap's usage errors are the only exit 2.
capture usage-unknown-flag fake list --bogus
capture list-running-and-stopped-empty fake list --running --stopped --format json
# A create that boots a VM: on a host that cannot, it fails with msb's
# diagnostic and leaves a Stopped record.
capture create-failed real create capture/tiny:1 --name capbox --pull never --quiet --label oma=capture --mount-named capvol:/data --tmpfs /scratch:64M
capture create-exists fake create capture/tiny:1 --name capbox --pull never --quiet
capture create-no-net real create capture/tiny:1 --name capnonet --pull never --quiet --no-net
chmod 0750 "$work/scratch/in.txt"
capture create-copy-file real create capture/tiny:1 --name capcopy --pull never --quiet --copy-file "$work/scratch/in.txt:/.oma-sandbox/agent"
capture list-records real list --format json
capture list-label real list --label oma=capture --format json
capture list-running-and-stopped fake list --running --stopped --format json
capture inspect-record real inspect capbox --format json
capture inspect-no-net real inspect capnonet --format json
capture inspect-copy-file real inspect capcopy --format json
# Pause and resume: stop of a Stopped sandbox succeeds; a sandbox that never
# booted has no metrics.
capture stop-stopped fake stop capbox
capture metrics-stopped fake metrics capbox --format json
# Preview ports: -p's grammar is checked before anything is made; a create
# with ports keeps them in its record (network.ports), each bound to
# 127.0.0.1 unless the spec names an address. --no-net denies ingress, so
# each forwarded guest port needs an ingress rule.
capture create-port-invalid fake create capture/tiny:1 --name capports --pull never -p 8080
capture create-port-bad-host fake create capture/tiny:1 --name capports --pull never -p 70000:80
capture create-port-bad-addr fake create capture/tiny:1 --name capports --pull never -p localhost:8080:80
capture create-port-bad-guest fake create capture/tiny:1 --name capports --pull never -p 8080:80/UDP
capture create-ports real create capture/tiny:1 --name capports --pull never --quiet --no-net --net-rule allow:ingress@any:tcp:80 -p 127.0.0.1:18080:80 -p 18081:81/udp -p '[::1]:18082:82'
capture inspect-ports real inspect capports --format json
capture stop-ports fake stop capports
# Resize: modify of a stopped sandbox applies at its next start and moves
# updated_at; a modify that changes nothing leaves it.
capture modify-missing fake modify capmissing --cpus 2
capture modify-zero-cpus fake modify capports --cpus 0
capture modify-too-many-cpus fake modify capports --cpus 300
capture modify-invalid-memory fake modify capports --memory 1Gi
capture modify-stopped fake modify capports --cpus 2 --memory 1G
capture inspect-modified real inspect capports --format json
capture modify-unchanged fake modify capports --cpus 2
capture inspect-unchanged real inspect capports --format json
# Fork: a snapshot of a Stopped sandbox, and a sandbox booted from it by
# create through a --conf file (create has no --from-snapshot). msb refuses
# --copy-file (a patch) with a snapshot, and leaves that name taken for
# good (its directory stays; no listing shows it, remove cannot find it):
# capghost is never used again. The sandbox booted from a snapshot has a
# copy of its root disk: removing the snapshot leaves it whole.
printf '{"image":{"snapshot":"capsnap"}}\n' >"$work/scratch/snap.json"
printf '{"image":{"snapshot":"capnosnap"}}\n' >"$work/scratch/nosnap.json"
capture snapshot-list-empty fake snapshot list --format json
capture snapshot-create-missing fake snapshot create capsnap --from capmissing
capture snapshot-create-invalid-name fake snapshot create bad/name --from capbox
capture snapshot-create real snapshot create capsnap --from capbox --label oma=capture
capture snapshot-create-exists fake snapshot create capsnap --from capbox --quiet
capture snapshot-list real snapshot list --format json
capture snapshot-inspect real snapshot inspect capsnap
capture create-conf-missing-snapshot fake create --conf "$work/scratch/nosnap.json" --name capfork --pull never --quiet
capture create-conf-copy-file fake create --conf "$work/scratch/snap.json" --name capghost --pull never --quiet --copy-file "$work/scratch/in.txt:/.oma-sandbox/agent"
capture create-from-snapshot real create --conf "$work/scratch/snap.json" --name capfork --pull never --quiet --label oma=capture --mount-named capvol:/data
capture inspect-from-snapshot real inspect capfork --format json
capture snapshot-remove fake snapshot remove capsnap
capture snapshot-remove-missing fake snapshot remove capsnap
capture snapshot-remove-missing-quiet fake snapshot remove -q capsnap
capture snapshot-list-after-remove fake snapshot list --format json
capture remove-records real remove --force capbox capnonet capcopy capports capfork
capture list-after-remove fake list --format json
capture volume-remove-last fake volume remove capvol
capture volume-list-after-remove fake volume list --format json
echo "capture-msb: msb $version cases in ${out#"$root"/}"
