package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// fixtureScript lays out the small workspace the per-tool rows work on.
const fixtureScript = `set -eu
mkdir -p bench/sub
for i in $(seq 1 200); do echo "line $i of the file"; done > bench/read.txt
printf 'alpha\nkeep\n' > bench/edit-ours.txt
printf 'alpha\nkeep\n' > bench/edit-seed.txt
printf 'alpha\nkeep\n' > bench/edit-cold-ours.txt
printf 'alpha\nkeep\n' > bench/edit-cold-seed.txt
for i in 1 2 3 4 5 6 7 8; do echo "plain $i" > "bench/sub/file$i.txt"; done
echo needle > bench/sub/needle.txt
`

// toolRow is one tool call as ours makes it and as the seed replays it.
type toolRow struct {
	name string
	ours func(b *testing.B, tb *tools.Toolbox)
	seed func(b *testing.B, s *seed)
}

// toolRows are the per-tool rows over the fixture in the workspace ws. Edits
// flip a word back and forth, so every call changes the file; each set of
// rows keeps its own flips. Row edit edits the file the toolbox's previous
// edit left (no read needed); row edit-cold edits through a new toolbox
// each time, which reads the file first. Row bash runs in the bash an
// agent that serves calls started for it as the toolbox's previous call
// ended; row bash-cold, through a new toolbox each time, in a bash of its
// own.
func toolRows(ws string) []toolRow {
	ctx := context.Background()
	content := strings.Repeat("written by the benchmark\n", 40)
	var oursFlip, seedFlip, oursColdFlip, seedColdFlip bool
	flip := func(f *bool) (string, string) {
		*f = !*f
		if *f {
			return "alpha", "omega"
		}
		return "omega", "alpha"
	}
	return []toolRow{
		{"read", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tb, "read", map[string]any{"path": "bench/read.txt"})
		}, func(b *testing.B, s *seed) {
			_, err := s.read(ctx, ws+"/bench/read.txt")
			check(b, err)
		}},
		{"write", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tb, "write", map[string]any{"path": "bench/out/ours.txt", "content": content})
		}, func(b *testing.B, s *seed) {
			check(b, s.write(ctx, ws+"/bench/out/seed.txt", content))
		}},
		{"edit", func(b *testing.B, tb *tools.Toolbox) {
			o, n := flip(&oursFlip)
			call(b, tb, "edit", map[string]any{"path": "bench/edit-ours.txt", "oldText": o, "newText": n})
		}, func(b *testing.B, s *seed) {
			o, n := flip(&seedFlip)
			check(b, s.edit(ctx, ws+"/bench/edit-seed.txt", o, n))
		}},
		{"edit-cold", func(b *testing.B, tb *tools.Toolbox) {
			o, n := flip(&oursColdFlip)
			call(b, tools.New(tb.Session(), tools.Options{}), "edit", map[string]any{"path": "bench/edit-cold-ours.txt", "oldText": o, "newText": n})
		}, func(b *testing.B, s *seed) {
			o, n := flip(&seedColdFlip)
			check(b, s.edit(ctx, ws+"/bench/edit-cold-seed.txt", o, n))
		}},
		{"ls", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tb, "ls", map[string]any{"path": "bench/sub"})
		}, func(b *testing.B, s *seed) {
			_, err := s.ls(ctx, ws+"/bench/sub")
			check(b, err)
		}},
		{"glob", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tb, "glob", map[string]any{"pattern": "sub/*.txt", "path": "bench"})
		}, func(b *testing.B, s *seed) {
			_, err := s.glob(ctx, ws+"/bench", "sub/*.txt")
			check(b, err)
		}},
		{"grep", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tb, "grep", map[string]any{"pattern": "needle", "path": ws + "/bench"})
		}, func(b *testing.B, s *seed) {
			_, err := s.grep(ctx, ws+"/bench", "needle")
			check(b, err)
		}},
		{"bash", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tb, "bash", map[string]any{"command": "echo hello"})
		}, func(b *testing.B, s *seed) {
			_, err := s.bash(ctx, "echo hello")
			check(b, err)
		}},
		{"bash-cold", func(b *testing.B, tb *tools.Toolbox) {
			call(b, tools.New(tb.Session(), tools.Options{}), "bash", map[string]any{"command": "echo hello"})
		}, func(b *testing.B, s *seed) {
			_, err := s.bash(ctx, "echo hello")
			check(b, err)
		}},
	}
}

// toolFixture lays the fixture out in sess and returns the toolbox on it and
// the seed replay pointed at the same sandbox.
func toolFixture(b *testing.B, client *msb.Client, sess *microvm.Session) (*tools.Toolbox, *seed) {
	b.Helper()
	mustShell(b, sess, fixtureScript)
	tb := tools.New(sess, tools.Options{})
	// Row edit measures an edit of the file as the toolbox left it, from
	// its first call on.
	call(b, tb, "write", map[string]any{"path": "bench/edit-ours.txt", "content": "alpha\nkeep\n"})
	names := sess.Names()
	return tb, &seed{client: client, sandbox: names.Sandbox, volume: names.Volume}
}

// BenchmarkToolCall is the wall time of each tool call with every msb
// invocation delayed by -bench.latency (a VM round trip stand-in), side by
// side: ours over the guest agent's channel (its open, one inspect and one
// exec --stream, happens in the fixture's setup), ours with one msb exec
// per call ("exec"), the seed's sequence for the same call, and the floor,
// one raw `msb exec NAME -- true`. The channel and exec sides each have a
// sandbox of their own; the seed replays against the exec side's, and the
// floor runs in the channel side's. Row tool=none is a bare Shell call of
// `true` on each transport: what a call costs before its tool's script.
func BenchmarkToolCall(b *testing.B) {
	env := newEnv(b, *latency)
	client := newClient(env)
	chanSess := mustChannelSession(b, client)
	execSess := mustSession(b, client)
	chanTB, _ := toolFixture(b, client, chanSess)
	execTB, sd := toolFixture(b, client, execSess)
	channelAndExecRows(b, client, chanSess, execSess, chanTB, execTB, sd)
}

// channelAndExecRows runs row tool=none (a bare Shell of `true`) and one row
// per tool: ours over chanSess's channel, exec on execSess, the seed's
// sequence against execSess when sd is not nil, and the floor in chanSess.
func channelAndExecRows(b *testing.B, client *msb.Client, chanSess, execSess *microvm.Session, chanTB, execTB *tools.Toolbox, sd *seed) {
	floorRun := variant{"floor", func() { floor(b, client, chanSess.Name()) }}
	// The transports alone: a Shell call of `true`, no tool around it.
	b.Run("tool=none", func(b *testing.B) {
		s := newSideBySide(b)
		for b.Loop() {
			s.round(
				variant{"ours", func() { mustShell(b, chanSess, "true") }},
				variant{"exec", func() { mustShell(b, execSess, "true") }},
				floorRun,
			)
		}
		s.report()
	})
	// Each side flips its own edit file: two sets of rows.
	ws := chanSess.Paths().Workspace
	chanRows, execRows := toolRows(ws), toolRows(ws)
	for i, row := range chanRows {
		b.Run("tool="+row.name, func(b *testing.B) {
			s := newSideBySide(b)
			vs := []variant{
				{"ours", func() { row.ours(b, chanTB) }},
				{"exec", func() { execRows[i].ours(b, execTB) }},
			}
			if sd != nil {
				vs = append(vs, variant{"seed", func() { execRows[i].seed(b, sd) }})
			}
			vs = append(vs, floorRun)
			for b.Loop() {
				s.round(vs...)
			}
			s.report()
		})
	}
}
