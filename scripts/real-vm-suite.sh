#!/usr/bin/env bash
# The real-VM suite (scripts/real-vm.sh): which tests run on a booting msb,
# built into a directory that runs them the same way on this host or in an
# outer guest that has no Go.
#
#   real-vm-suite.sh build DIR   DIR gets a module-shaped tree: go.mod,
#                                .tools/msb, bin/sandbox-image.tar, each
#                                package's test binary with its testdata,
#                                suite.tsv and run-suite.sh (this script)
#   DIR/run-suite.sh [run LANE]  runs suite.tsv's lines, two lanes side by
#                                side (or one lane); their logs go to
#                                DIR/results; the last lines are
#                                "real-vm: N passed, N failed, N skipped" and,
#                                when every binary passed, ran a test and
#                                skipped none, "real-vm: suite ok"
# OMA_SUITE_RUN, at build time, keeps only the top-level tests whose names
# match it (an extended regular expression).
set -euo pipefail

# chunk_limit bounds one line of suite.tsv, in seconds: a test binary's
# -test.timeout (Go then names the tests still running and dumps their
# goroutines into the log), a script's timeout. A hang costs its line,
# not the lane's whole time. The slowest lines take about 9 minutes under
# emulation on a loaded host.
chunk_limit=${OMA_VM_CHUNK_LIMIT:-1200}

# tests_calling FILE... -- HELPER...: the top-level tests whose bodies call
# one of the helpers, one a line.
tests_calling() {
  local files=() helpers=()
  while [ "$1" != -- ]; do files+=("$1"); shift; done
  shift
  helpers=("$@")
  awk -v helpers="$(IFS='|'; echo "${helpers[*]}")" '
    /^func Test[A-Za-z0-9_]*\(t \*testing\.T\)/ { name = $2; sub(/\(.*/, "", name) }
    /^}/ { name = "" }
    name != "" && $0 ~ "(" helpers ")\\(t," { print name; name = "" }
  ' "${files[@]}" | sort -u
}

# tests_named PREFIX FILE...: the top-level tests whose names start with PREFIX.
tests_named() {
  local prefix=$1
  shift
  sed -n "s/^func \(${prefix}[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p" "$@" | sort -u
}

build() {
  local dir=$1 root
  root=$(cd "$(dirname "$0")/.." && pwd)
  cd "$root"
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/results"
  cp go.mod "$dir/"
  mkdir -p "$dir/.tools/msb"
  cp -a .tools/msb/bin .tools/msb/lib "$dir/.tools/msb/"
  cp bin/sandbox-image.tar "$dir/bin/"
  cp "$0" "$dir/run-suite.sh"
  : >"$dir/suite.tsv"
  # add LANE NAME PKG ARGS ENV...: a line of suite.tsv. Lanes 1 and 2 run
  # side by side, one microVM at a time in each; lane 0 (the benchmarks)
  # runs after them, or after lane 1 in lane 1's outer guest.
  add() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${*:5}" >>"$dir/suite.tsv"; }
  # binary PKG: PKG's test binary, with its testdata.
  binary() {
    [ -x "$dir/$1/$(basename "$1").test" ] && return
    mkdir -p "$dir/$1"
    CGO_ENABLED=0 go test -c -o "$dir/$1/$(basename "$1").test" "./$1"
    [ ! -d "$1/testdata" ] || cp -a "$1/testdata" "$dir/$1/"
  }
  # tests LANE NAME PKG TESTS ENV...: PKG's TESTS (names, one a line) less
  # those OMA_SUITE_RUN leaves out, in lines of at most OMA_VM_CHUNK tests
  # (NAME-1, NAME-2, ...), so that an outer guest that dies costs one
  # chunk, not the whole binary's run. The chunks of NAME share an msb
  # home (realvm.HomeEnv): the image is loaded once.
  tests() {
    local lane=$1 name=$2 pkg=$3 tests=$4 chunk=0 part
    shift 4
    if [ -n "${OMA_SUITE_RUN:-}" ]; then tests=$(grep -E -- "$OMA_SUITE_RUN" <<<"$tests" || true); fi
    [ -n "$tests" ] || return 0
    binary "$pkg"
    while read -r part; do
      chunk=$((chunk + 1))
      add "$lane" "$name-$chunk" "$pkg" "-test.run ^($part)\$" OMA_REALVM_HOME=/var/tmp/oma-realvm/$name "$@"
    done < <(paste -d'|' $(printf -- '- %.0s' $(seq "${OMA_VM_CHUNK:-12}")) <<<"$tests" | sed 's/|*$//')
  }
  local shared
  shared=$(tests_calling tools/*_test.go -- forEachBackend)
  # The tools' and transfer's shared suites on the real msb: over the guest
  # agent's channel with its builtins (lane 1), and one exec per call
  # (lane 2).
  tests 1 tools-channel tools "$shared" OMA_TEST_BACKENDS=real-msb-channel
  tests 2 tools-exec tools "$shared" OMA_TEST_BACKENDS=real-msb
  # (Two skip on msb by design: the uploads root of the host stand-in,
  # and a directory unreadable to a collector that runs as root.)
  shared=$(tests_calling transfer/*_test.go -- backends |
    grep -vx -e TestMaterializeUploadsRefuseARootOthersCanWrite -e TestCollectSurvivesAnUnreadableDirectory)
  tests 1 transfer-channel transfer "$shared" OMA_TEST_BACKENDS=real-msb-channel
  tests 2 transfer-exec transfer "$shared" OMA_TEST_BACKENDS=real-msb
  # Whole sessions: the lifecycle and the reaper, poisoning, pause and
  # resume, fork, an allowlisted host port and a secret (in lane 2: lane
  # 1 has the chaos suite, the capture and the benchmarks after it, and
  # ran 2,813 s to lane 2's 1,922 with these in lane 1).
  # (An agent older than this program, for replacing one, built here:
  # L1 has no Go.)
  CGO_ENABLED=0 go build -trimpath -tags oma_older_agent -o "$dir/bin/oma-guest-agent-older" ./cmd/oma-guest-agent
  tests 2 e2e e2e/realmsb "$(tests_named TestRealMSB e2e/realmsb/*_test.go)" OMA_TEST_OLDER_AGENT=../../bin/oma-guest-agent-older
  # The chaos suite's msb half, at a size that fits: cancellations,
  # parallel calls and a hostile guest on real microVMs.
  tests 1 chaos chaos TestChaosRealVM
  # What the real msb answers once a VM boots, for fakemsb's golden test.
  if [ -z "${OMA_SUITE_RUN:-}" ] || grep -Eq -- "$OMA_SUITE_RUN" <<<capture-msb-vm; then
    cp scripts/capture-msb-vm.sh "$dir/"
    add 1 capture . "./capture-msb-vm.sh .tools/msb/bin/msb bin/sandbox-image.tar results/capture"
  fi
  # Each tool's time over the channel and one exec per call beside a raw
  # msb exec, and a session's create and close: alone, after the rest.
  if [ -z "${OMA_SUITE_RUN:-}" ] || grep -Eq -- "$OMA_SUITE_RUN" <<<BenchmarkRealVM; then
    binary bench
    add 0 bench bench "-test.run ^\$ -test.bench ^BenchmarkRealVMToolCall\$ -test.benchmem -test.benchtime ${OMA_VM_BENCHTIME:-3x} -test.count ${OMA_VM_BENCHCOUNT:-1}"
    # A session's create and close: once each way (a boot under emulation
    # takes a minute or two).
    add 0 bench-session bench "-test.run ^\$ -test.bench ^BenchmarkRealVMSession\$ -test.benchmem -test.benchtime 1x"
  fi
  [ -s "$dir/suite.tsv" ] || { echo "real-vm-suite: nothing matches OMA_SUITE_RUN=$OMA_SUITE_RUN" >&2; exit 1; }
}

# one DIR NAME PKG ARGS ENVS: runs one line of suite.tsv; its log goes to
# results/NAME.log and its counts, "passed failed skipped ok", to
# results/NAME.counts. A script is one test, passed when it exits 0.
one() {
  local dir=$1 name=$2 pkg=$3 args=$4 envs=$5 log start rc p f s ok=1
  log=$dir/results/$name.log
  start=$(date +%s)
  echo "real-vm: $name: starting"
  set +e
  if [[ $args == ./* ]]; then
    # shellcheck disable=SC2086 # args is a command line of plain words
    (cd "$dir" && timeout "$chunk_limit" $args) >"$log" 2>&1
    rc=$?
    if [ "$rc" = 124 ]; then echo "real-vm: $name: timed out after $chunk_limit s" >>"$log"; fi
    p=$((rc == 0)) f=$((rc != 0)) s=0
  else
    # Each top-level test's verdict, each benchmark's line and what a
    # failing test says, as they come.
    # shellcheck disable=SC2086 # envs and args are lists of plain words
    (cd "$dir/$pkg" && env $envs "./$(basename "$pkg").test" -test.v -test.count=1 -test.timeout "${chunk_limit}s" $args) 2>&1 |
      tee "$log" | grep --line-buffered -a -E $'^--- |^Benchmark.*ns/op|^ *[A-Za-z0-9_]*\\.go:[0-9]+: |^ +\t|^panic' |
      sed -u "s|^|real-vm: $name: |"
    rc=${PIPESTATUS[0]}
    p=$(grep -ac -- '--- PASS\|^Benchmark.*ns/op' "$log")
    f=$(grep -ac -- '--- FAIL' "$log")
    s=$(grep -ac -- '--- SKIP' "$log")
  fi
  set -e
  grep -a '^panic:' "$log" | sed "s|^|real-vm: $name: |" | head -5 || true
  # A hang: which tests were still running (Go's own list), or the script.
  awk '/^panic: test timed out/ { t = 1; next } t && /^\trunning tests:/ { r = 1; next } r && /^\t\t/ { sub(/^\t\t/, ""); print "still running: " $0; next } { r = 0 }' "$log" |
    sed "s|^|real-vm: $name: |"
  grep -a '^real-vm: .*: timed out after' "$log" || true
  if [ "$rc" -ne 0 ] || [ "$p" -eq 0 ] || [ "$s" -ne 0 ]; then ok=0; fi
  echo "real-vm: $name: $p passed, $f failed, $s skipped, exit $rc, $(($(date +%s) - start)) s"
  echo "$p $f $s $ok" >"$dir/results/$name.counts"
}

# lane DIR N: the lines of lane N, one after another, but those a run
# before this one finished (L1 booted again after its kernel died).
lane() {
  local dir=$1 want=$2 lane name pkg args envs
  while IFS=$'\t' read -r lane name pkg args envs; do
    if [ "$lane" = "$want" ] && [ ! -f "$dir/results/$name.counts" ]; then
      # A log without counts: L1 stopped (died, or froze and was killed)
      # while this line ran. It runs again, as a failed line does, and only
      # once more should it fail.
      if [ -f "$dir/results/$name.log" ]; then
        echo "real-vm: $name: L1 stopped while it ran; once more"
        mv "$dir/results/$name.log" "$dir/results/$name.first.log"
      fi
      one "$dir" "$name" "$pkg" "$args" "$envs"
      # (Not a line that hit chunk_limit: a hang would cost its time twice.)
      if [ "$(cut -d' ' -f4 "$dir/results/$name.counts")" != 1 ] && [ ! -f "$dir/results/$name.first.log" ] &&
        ! grep -aq -e '^panic: test timed out' -e '^real-vm: .*: timed out after' "$dir/results/$name.log"; then
        # Emulation makes a timing slip now and then: a chunk that failed
        # runs once more, and the log names it; its first log is kept.
        # It runs in an msb home of its own: an msb killed while it held
        # its install lease leaves msb refusing every command in that home
        # for 30 minutes. The msb package's own kills wait for that (see
        # docs/msb.md), but not an msb that dies with a failed test's
        # process.
        echo "real-vm: $name: failed ($(grep -a '^--- FAIL' "$dir/results/$name.log" | cut -d' ' -f3 | paste -sd' ')); once more"
        mv "$dir/results/$name.log" "$dir/results/$name.first.log"
        one "$dir" "$name" "$pkg" "$args" "$(sed 's|OMA_REALVM_HOME=\([^ ]*\)|OMA_REALVM_HOME=\1-again|' <<<"$envs")"
      fi
      sync
    fi
  done <"$dir/suite.tsv"
}

# run [LANE]: lanes 1 and 2 side by side, then lane 0, and the sums; with
# LANE, that lane alone (an outer guest per lane), and lane 0 after lane 1
# (the shorter).
run() {
  local dir passed=0 failed=0 skipped=0 ok=1 p f s k name lanes
  dir=$(cd "$(dirname "$0")" && pwd)
  mkdir -p "$dir/results"
  set -f # the arguments in suite.tsv are words, never patterns
  case ${1:-} in
    "") lanes="1 2 0"; lane "$dir" 1 & lane "$dir" 2 & wait; lane "$dir" 0 ;;
    1) lanes="1 0"; lane "$dir" 1; lane "$dir" 0 ;;
    2) lanes=2; lane "$dir" 2 ;;
    *) echo "run-suite: no lane $1" >&2; exit 2 ;;
  esac
  for name in $(awk -F'\t' -v lanes=" $lanes " 'index(lanes, " " $1 " ") { print $2 }' "$dir/suite.tsv"); do
    if [ ! -f "$dir/results/$name.counts" ]; then
      echo "real-vm: $name: never finished"
      ok=0
      continue
    fi
    read -r p f s k <"$dir/results/$name.counts"
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    [ "$k" = 1 ] || ok=0
  done
  # (ls and sed, not a glob: set -f is on.)
  for name in $(ls "$dir/results" | sed -n 's/\.first\.log$//p'); do
    echo "real-vm: $name ran twice: its first run failed or did not end (results/$name.first.log)"
  done
  echo "real-vm: $passed passed, $failed failed, $skipped skipped"
  if [ "$ok" = 1 ]; then echo "real-vm: suite ok"; fi
}

case ${1:-run} in
  build) build "${2:?build needs a directory}" ;;
  run) run "${2:-}" ;;
  *) echo "usage: $0 build DIR | run [LANE]" >&2; exit 2 ;;
esac
