//go:build linux

package msb

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestStartStreamsBothWays: a started msb gets the args exec builds,
// answers each stdin line while it runs (stdin and stdout both stay open),
// sees the filtered environment, and exits 0 at stdin's end.
func TestStartStreamsBothWays(t *testing.T) {
	t.Setenv("OMA_TEST_SECRET", "hunter2")
	cli := &CLI{Path: fakeMSB(t, `echo "args:$*"; echo "secret:${OMA_TEST_SECRET-unset} color:$NO_COLOR extra:$EXTRA"
while read -r line; do echo "got:$line"; done; echo bye >&2`), Env: []string{"EXTRA=x"}}
	c := NewClient(cli)
	p, err := c.ExecStream(context.Background(), ExecOptions{Name: "box", User: "0", Argv: []string{"/agent", "serve"}})
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(p.Stdout)
	line := func() string {
		t.Helper()
		s, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return s
	}
	if got := line(); got != "args:exec --stream --user 0 box -- /agent serve\n" {
		t.Errorf("args line %q", got)
	}
	if got := line(); got != "secret:unset color:1 extra:x\n" {
		t.Errorf("env line %q", got)
	}
	for _, w := range []string{"one", "two"} {
		if _, err := io.WriteString(p.Stdin, w+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := line(); got != "got:"+w+"\n" {
			t.Errorf("echo %q", got)
		}
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop = %v, want a clean exit at stdin's end", err)
	}
	if string(p.Stderr()) != "bye\n" || p.ExitCode() != 0 {
		t.Errorf("stderr %q exit %d", p.Stderr(), p.ExitCode())
	}
}

// TestStartStopKillsWhatIgnoresEOF: an msb that ignores stdin's end is
// killed after the grace period, with everything it started; Wait then
// says ErrAborted. Nothing is left running.
func TestStartStopKillsWhatIgnoresEOF(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `sleep 300 & echo $$; echo $!; exec 0<&-; wait`)}
	p, err := cli.Start(context.Background(), Call{Args: []string{"exec", "--stream", "box", "--", "x"}})
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]byte, 0, 64)
	buf := make([]byte, 64)
	for strings.Count(string(pids), "\n") < 2 {
		n, err := p.Stdout.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, buf[:n]...)
	}
	ids := pidLines(t, pids, 2)
	killAtEnd(t, ids[1])
	start := time.Now()
	err = p.Stop(200 * time.Millisecond)
	if !errors.Is(err, ErrAborted) {
		t.Errorf("Stop = %v, want ErrAborted", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop took %v", d)
	}
	requireGone(t, ids[0], ids[1])
}

// TestStartExitErrorClassified: msb's own failure is an *ExitError of the
// kind Run would report, with its stderr.
func TestStartExitErrorClassified(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `printf 'error: sandbox not found: box\n' >&2; exit 1`)}
	p, err := cli.Start(context.Background(), Call{Args: []string{"exec", "--stream", "box", "--", "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(p.Stdout); err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	var exitErr *ExitError
	if !errors.As(err, &exitErr) || !errors.Is(err, ErrSandboxNotFound) || exitErr.ExitCode != 1 {
		t.Errorf("Wait = %v, want ErrSandboxNotFound exit 1", err)
	}
	_ = p.Stop(time.Second)
}

// TestStartRefusals: what Start cannot honour is refused before anything
// runs, and a runner that cannot start processes says so.
func TestStartRefusals(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `exit 0`)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cli.Start(ctx, Call{Args: []string{"exec"}}); !errors.Is(err, ErrAborted) {
		t.Errorf("cancelled ctx: %v, want ErrAborted", err)
	}
	if _, err := cli.Start(context.Background(), Call{Args: []string{"exec"}, Stdin: strings.NewReader("")}); !errors.Is(err, ErrInvalid) {
		t.Errorf("with Stdin: %v, want ErrInvalid", err)
	}
	if _, err := cli.Start(context.Background(), Call{Args: []string{"exec", "a\x00"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NUL arg: %v, want ErrInvalid", err)
	}
	if _, err := NewClient(&CLI{Path: "/nonexistent/msb"}).ExecStream(context.Background(), ExecOptions{Name: "box", Argv: []string{"x"}}); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("missing binary: %v, want a start error", err)
	}
	if _, err := NewClient(runnerFunc(nil)).ExecStream(context.Background(), ExecOptions{Name: "box", Argv: []string{"x"}}); !errors.Is(err, ErrNoStarter) {
		t.Errorf("plain runner: %v, want ErrNoStarter", err)
	}
	if _, err := NewClient(cli).ExecStream(context.Background(), ExecOptions{Name: "bad name", Argv: []string{"x"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad name: %v, want ErrInvalid", err)
	}
}

type runnerFunc func(context.Context, Call) (*Result, error)

func (f runnerFunc) Run(ctx context.Context, c Call) (*Result, error) { return f(ctx, c) }
