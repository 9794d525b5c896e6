#!/usr/bin/env bash
# End-to-end test of `oma-sandbox mcp` against fakemsb, driven by the
# official TypeScript MCP client (client.mjs), then 72 parallel calls on one
# session on fakemsb and on the local backend (parallel.mjs). Afterwards the
# session's outputs must be in --outputs, and fakemsb must list no sandbox
# and no volume, the local state no session. Needs go, node (>= 20) and npm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

tmp=$(mktemp -d)
msb="$tmp/msb"
cleanup() {
  # Remove whatever a failed run left, so no fakemsb holder outlives it.
  if [ -x "$msb" ]; then
    names=$("$msb" list -q 2>/dev/null || true)
    if [ -n "$names" ]; then
      # shellcheck disable=SC2086 # one name per word
      "$msb" remove --force -q $names >/dev/null 2>&1 || true
    fi
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

cd "$root"
go build -o bin/oma-sandbox ./cmd/oma-sandbox
CGO_ENABLED=0 go build -o bin/fakemsb ./fakemsb

export FAKEMSB_HOME="$tmp/fakemsb"
mkdir -p "$FAKEMSB_HOME"
# msb is run with a reduced environment, so the wrapper carries the state
# directory itself.
cat >"$msb" <<WRAPPER
#!/bin/sh
FAKEMSB_HOME='$FAKEMSB_HOME'
export FAKEMSB_HOME
exec '$root/bin/fakemsb' "\$@"
WRAPPER
chmod +x "$msb"

# scripts/deps.sh puts a new enough node here when the system's is too old.
if [ -x "$root/.tools/node/bin/node" ]; then
  PATH="$root/.tools/node/bin:$PATH"
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "e2e/mcp: node $(node --version) is older than 20; run scripts/deps.sh" >&2
  exit 1
fi

if [ ! -d "$here/node_modules" ]; then
  (cd "$here" && npm ci --no-audit --no-fund)
fi

export OMA_MSB="$msb" XDG_STATE_HOME="$tmp/state"
node "$here/client.mjs" "$root/bin/oma-sandbox" mcp --backend msb --outputs "$tmp/outputs"

if [ "$(cat "$tmp/outputs/report.txt" 2>/dev/null)" != "from mcp" ]; then
  echo "e2e/mcp: outputs were not collected into --outputs" >&2
  exit 1
fi

# 72 parallel calls on one session, on each backend.
for backend in msb local; do
  node "$here/parallel.mjs" "$root/bin/oma-sandbox" mcp --backend "$backend"
done

sandboxes=$("$msb" list --format json)
volumes=$("$msb" volume list --format json)
if [ "$sandboxes" != "[]" ] || [ "$volumes" != "[]" ]; then
  echo "e2e/mcp: left behind: sandboxes $sandboxes, volumes $volumes" >&2
  exit 1
fi
local_sessions=$("$root/bin/oma-sandbox" session list --backend local)
if [ -n "$local_sessions" ]; then
  echo "e2e/mcp: left behind: local sessions $local_sessions" >&2
  exit 1
fi
echo "e2e/mcp: ok, no sandbox, volume or local session left"
