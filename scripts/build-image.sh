#!/usr/bin/env bash
# Builds the guest image sessions run on msb (image/Dockerfile's contents)
# from Debian packages with mmdebstrap — no Docker, no registry — writes it
# as a docker-style archive (bin/sandbox-image.tar) and loads it into msb
# under the reference sessions use by default.
#
# Needs root (mmdebstrap's root mode; mmdebstrap is installed with apt-get
# when missing) and a Debian mirror. Environment:
#   OMA_IMAGE_REF    reference to load it as (default: microvm.DefaultImage)
#   OMA_IMAGE_SUITE  Debian suite (default bookworm)
#   OMA_MSB          msb binary (default .tools/msb/bin/msb, else msb on PATH)
#   OMA_IMAGE_NOLOAD set to 1 to write the archive only
#   MSB_HOME         msb's state directory, as msb reads it
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

ref=${OMA_IMAGE_REF:-$(sed -n 's/^[[:space:]]*DefaultImage[[:space:]]*= "\(.*\)"$/\1/p' session/microvm/session.go)}
[ -n "$ref" ] || { echo "build-image: cannot find microvm.DefaultImage in session/microvm/session.go" >&2; exit 1; }
suite=${OMA_IMAGE_SUITE:-bookworm}
archive=$root/bin/sandbox-image.tar
msb=${OMA_MSB:-}
if [ -z "$msb" ]; then
  if [ -x .tools/msb/bin/msb ]; then msb=$root/.tools/msb/bin/msb; else msb=msb; fi
fi

if [ "${OMA_IMAGE_NOLOAD:-}" != 1 ] && ! command -v "$msb" >/dev/null 2>&1; then
  echo "build-image: msb not found ($msb): run make deps (installs .tools/msb), set OMA_MSB, or OMA_IMAGE_NOLOAD=1 to write the archive only" >&2
  exit 1
fi
[ "$(id -u)" -eq 0 ] || { echo "build-image: run as root (mmdebstrap builds the root filesystem in root mode)" >&2; exit 1; }
if ! command -v mmdebstrap >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { echo "build-image: mmdebstrap not found, and no apt-get to install it" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi
case $(dpkg --print-architecture) in
  amd64) arch=amd64 ;;
  arm64) arch=arm64 ;;
  *) echo "build-image: unsupported architecture $(dpkg --print-architecture)" >&2; exit 1 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p bin

# Essential packages (bash, coreutils, findutils, tar, util-linux, ...) plus
# what the tools need beyond them; no apt, docs, man pages or locales. The
# mount points exist in the image; the workspace belongs to the agent user.
# SOURCE_DATE_EPOCH pins file times, so one package set gives one layer.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
mmdebstrap --quiet --mode=root --variant=essential --format=tar \
  --include=bash,ripgrep,coreutils,findutils,tar,procps,util-linux \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='mkdir -p "$1/workspace" "$1/mnt/session/uploads" "$1/mnt/session/outputs"' \
  --customize-hook='chown 65534:65534 "$1/workspace" && chmod 755 "$1/workspace"' \
  --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/log/* "$1"/var/lib/apt/lists/*' \
  "$suite" "$work/rootfs.tar"

created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
go run ./image/mkarchive -layer "$work/rootfs.tar" -ref "$ref" -arch "$arch" -created "$created" -o "$archive"
echo "build-image: wrote $archive ($(du -h "$archive" | cut -f1)) for $ref"

if [ "${OMA_IMAGE_NOLOAD:-}" = 1 ]; then
  exit 0
fi
"$msb" load --quiet --tag "$ref" --input "$archive"
"$msb" image inspect "$ref" --format json >/dev/null
echo "build-image: loaded $ref into msb (msb image inspect $ref)"
