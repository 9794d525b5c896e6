package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// populateScript makes $1 files laid out as AA/BB/C (two-digit directories,
// one-digit names), so that 100,000 "./AA/BB/C" records, at 10 bytes each
// with their NUL, fit the glob tool's 1 MiB enumeration limit. Every file
// holds one line; one in 10,000 holds "needle".
const populateScript = `set -eu
n=$1
mkdir -p {00..99}/{00..99}
for ((i = 0; i < n; i++)); do
	printf -v p '%02d/%02d/%d' $((i / 1000)) $((i / 10 % 100)) $((i % 10))
	if ((i % 10000 == 4242)); then echo needle >"$p"; else echo line >"$p"; fi
done
`

// BenchmarkSearch is glob and grep over a workspace of -bench.files files:
// time to result and this process's peak heap, side by side with the seed's
// sequence (the same search, then its cleanup exec) and with the bare find
// or rg run through one msb exec in the same sandbox, its output buffered
// as a plain client would. The glob pattern matches 10 files, so the whole
// tree is enumerated; so is the grep pattern. No latency is injected.
func BenchmarkSearch(b *testing.B) {
	if *searchFiles < 42180 {
		b.Skip("-bench.files must be at least 42180: the glob pattern matches files 42170 to 42179")
	}
	ctx := context.Background()
	env := newEnv(b, 0)
	client := newClient(env)
	sess := mustSession(b, client)
	mustShell(b, sess, populateScript, strconv.Itoa(*searchFiles))
	tb := tools.New(sess, tools.Options{})
	sd := &seed{client: client, sandbox: sess.Name()}
	bare := func(argv ...string) func(b *testing.B) {
		return func(b *testing.B) {
			res, err := client.Exec(ctx, msb.ExecOptions{Name: sess.Name(), Argv: argv, Workdir: "/workspace"}, msb.Streams{})
			check(b, err)
			if len(res.Stdout) == 0 {
				b.Fatalf("%s printed nothing", argv[0])
			}
		}
	}
	rows := []struct {
		name string
		ours func(b *testing.B) string
		seed func(b *testing.B) []string
		bare func(b *testing.B)
	}{
		{"glob",
			func(b *testing.B) string { return call(b, tb, "glob", map[string]any{"pattern": "42/17/*"}) },
			func(b *testing.B) []string {
				m, err := sd.glob(ctx, "/workspace", "42/17/*")
				check(b, err)
				return m
			},
			bare("find", ".", "-type", "f", "-print0")},
		{"grep",
			func(b *testing.B) string {
				return call(b, tb, "grep", map[string]any{"pattern": "needle", "path": "/workspace"})
			},
			func(b *testing.B) []string {
				m, err := sd.grep(ctx, "/workspace", "needle")
				check(b, err)
				return m
			},
			bare("rg", "--no-config", "--hidden", "--no-ignore", "--files-with-matches", "--null", "needle", "/workspace")},
	}
	for _, row := range rows {
		want := expected(row.name, *searchFiles)
		b.Run("tool="+row.name, func(b *testing.B) {
			s := newSideBySide(b)
			peak := map[string]uint64{}
			for b.Loop() {
				s.round(
					variant{"ours", func() {
						peak["ours"] = max(peak["ours"], heapPeak(func() {
							out := row.ours(b)
							if got := len(strings.Split(out, "\n")); got != want {
								b.Fatalf("ours found %d files, want %d:\n%s", got, want, out)
							}
						}))
					}},
					variant{"seed", func() {
						peak["seed"] = max(peak["seed"], heapPeak(func() {
							if got := len(row.seed(b)); got != want {
								b.Fatalf("the seed replay found %d files, want %d", got, want)
							}
						}))
					}},
					variant{"bare", func() { peak["bare"] = max(peak["bare"], heapPeak(func() { row.bare(b) })) }},
				)
			}
			s.report()
			b.ReportMetric(float64(peak["ours"]), "peak-heap-B")
			b.ReportMetric(float64(peak["seed"]), "seed-peak-heap-B")
			b.ReportMetric(float64(peak["bare"]), "bare-peak-heap-B")
			b.ReportMetric(float64(peak["ours"])/float64(peak["bare"]), "heap-x-bare")
		})
	}
}

// expected is how many of n populated files the row's pattern matches:
// glob's 42/17/* is files 42170 to 42179, grep's needle one in 10,000
// from file 4242.
func expected(tool string, n int) int {
	if tool == "glob" {
		return 10
	}
	return (n-4242-1)/10000 + 1
}
