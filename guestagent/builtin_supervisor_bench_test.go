//go:build linux

package guestagent

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// BenchmarkBashSupervisor sets the bash builtin beside the bash it starts:
// "bash" is that process alone (the command reader given `true`), "builtin"
// the whole builtin around it; their difference is the supervisor's cost.
func BenchmarkBashSupervisor(b *testing.B) {
	b.Run("run=bash", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("/bin/bash", bashproto.ReaderArgv("true\n")[1:]...)
			cmd.Stdin = strings.NewReader("true\n")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("run=builtin", func(b *testing.B) {
		dir := b.TempDir()
		for b.Loop() {
			args, stdin := bashproto.Args(bashproto.NewCall(), "true", time.Minute, bashproto.LogsIn(dir), bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
			var out bytes.Buffer
			code, err := RunBuiltin(agentwire.BuiltinBashSupervisor, args, bytes.NewReader(stdin), &out, io.Discard)
			if err != nil || code != 0 {
				b.Fatalf("exit %d, %v: %q", code, err, out.String())
			}
		}
	})
}

// BenchmarkCommandReader sets CommandReader (`read -N`, large reads) beside
// the reader it replaced (`read -d ""`, a byte a read) on a command of
// 64 KiB, the size of a file an agent writes through a heredoc.
func BenchmarkCommandReader(b *testing.B) {
	text := ": '" + strings.Repeat("x", 64<<10) + "'\n"
	for _, r := range []struct{ name, program string }{
		{"reader=count", bashproto.CommandReader},
		{"reader=delimiter", `IFS= read -r -d "" __oma_command; shift; exec </dev/null; eval "unset __oma_command; $__oma_command"`},
	} {
		b.Run(r.name, func(b *testing.B) {
			for b.Loop() {
				argv := bashproto.ReaderArgv(text)
				argv[2] = r.program
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Stdin = strings.NewReader(text)
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
