#!/usr/bin/env bash
# Installs what oma-sandbox's tests and local backend need on a Debian host:
# bubblewrap (the local sandbox and fakemsb's guests), ripgrep (grep tool),
# util-linux tools, and Node.js with npm (the MCP end-to-end test drives the
# server with the TypeScript SDK client). Safe to run again; installs only
# what is missing.
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
