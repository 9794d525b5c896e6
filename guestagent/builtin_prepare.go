//go:build linux

package guestagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// agentUID owns the workspace and the outputs in an msb sandbox: the
// image's agent user.
const agentUID = 65534

// prepare readies a new msb sandbox, as root, in the one exec that follows
// its create: the uploads root becomes root's (755), the outputs root and
// the workspace the agent user's (the outputs 700), then grepPreflight
// runs in the workspace. Its args: the uploads root, the outputs root, the
// workspace.
func prepare(c *builtinCall) int {
	if len(c.Args) != 3 {
		return c.badArgs(agentwire.BuiltinPrepare, 3)
	}
	uploads, outputs, ws := c.userPath(c.Args[0]), c.userPath(c.Args[1]), c.userPath(c.Args[2])
	for _, step := range []struct {
		path string
		uid  int
		mode os.FileMode // 0: left as it is
	}{
		{uploads, 0, 0o755},
		{outputs, agentUID, 0o700},
		{ws, agentUID, 0},
	} {
		err := os.Chown(step.path, step.uid, step.uid)
		if err == nil && step.mode != 0 {
			err = os.Chmod(step.path, step.mode)
		}
		if err != nil {
			fmt.Fprintf(c.Stderr, "prepare: %v\n", err)
			return 1
		}
	}
	return runPreflight(c, ws)
}

// grepPreflight proves, in its one arg's directory, that the guest's rg
// behaves as grep-search relies on (see grep's docs).
func grepPreflight(c *builtinCall) int {
	if len(c.Args) != 1 {
		return c.badArgs(agentwire.BuiltinGrepPreflight, 1)
	}
	return runPreflight(c, c.userPath(c.Args[0]))
}

// runPreflight checks, on scratch files below dir that it removes again,
// that a match is listed as one record (path, NUL, count, newline), no
// match exits 1, an invalid regex exits with another status, hidden and
// ignored files are searched, --glob filters, a directory search lists no
// file holding a NUL (even one whose match comes first and whose NUL lies
// beyond ripgrep's 64 KiB read buffer), and the NUL check of a named file
// tells binary from text. It says on stderr which check failed, status 1.
func runPreflight(c *builtinCall, dir string) int {
	fail := func(msg string) int {
		fmt.Fprintf(c.Stderr, "grep preflight: %s\n", msg)
		return 1
	}
	scratch, err := os.MkdirTemp(dir, ".oma-grep-preflight.")
	if err != nil {
		return fail("cannot create scratch directory")
	}
	defer os.RemoveAll(scratch)
	tree, bin := filepath.Join(scratch, "tree"), filepath.Join(scratch, "bin")
	files := []struct{ path, body string }{
		{tree + "/text.txt", "needle\n"},
		{tree + "/none.txt", "other\n"},
		{tree + "/.hidden.txt", "needle\n"},
		{tree + "/ignored.txt", "needle\n"},
		{tree + "/.ignore", "ignored.txt\n"},
		{bin + "/early.bin", "\x00needle\x00tail"},
		{bin + "/late.bin", "needle\n" + strings.Repeat(" ", 70000) + "\x00tail"},
	}
	for _, f := range files {
		err := os.MkdirAll(filepath.Dir(f.path), 0o755)
		if err == nil {
			err = os.WriteFile(f.path, []byte(f.body), 0o644)
		}
		if err != nil {
			return fail("cannot write scratch files")
		}
	}
	p := preflight{c: c}
	text := tree + "/text.txt"
	switch {
	case !p.search("--", "needle", text).only(0, text):
		return fail("a match is not listed as one record of path, NUL, count and newline")
	case p.search("--", "needle", tree+"/none.txt").code != 1:
		return fail(fmt.Sprintf("no match exits %d, not 1", p.last.code))
	case p.search("--", "[", text).code <= 1:
		return fail(fmt.Sprintf("an invalid regex exits %d", p.last.code))
	case !p.search("--", "needle", tree).only(0, text, tree+"/.hidden.txt", tree+"/ignored.txt"):
		return fail("a directory search does not list exactly the hidden, ignored and plain matches")
	case !p.search("--glob", "**/t*.txt", "--", "needle", tree).only(0, text):
		return fail("a search does not honour --glob")
	case !p.search("--", "needle", bin).only(1):
		return fail(fmt.Sprintf("a directory search lists binary files (exit %d)", p.last.code))
	case p.rg("--no-config", "-qa", "--", `\x00`, bin+"/late.bin").code != 0:
		return fail(fmt.Sprintf("NUL detection in a binary file exits %d", p.last.code))
	case p.rg("--no-config", "-qa", "--", `\x00`, text).code != 1:
		return fail(fmt.Sprintf("NUL detection in a text file exits %d", p.last.code))
	}
	return 0
}

type preflight struct {
	c    *builtinCall
	last rgRun
}

type rgRun struct {
	code int // -1: rg could not be started
	out  []byte
}

// search runs rg as grep-search does, with args after its own.
func (p *preflight) search(args ...string) rgRun {
	return p.rg(append(slices.Clip(rgSearchFlags), args...)...)
}

// rg runs rg with args in the C locale, its stderr dropped, ended with the
// call.
func (p *preflight) rg(args ...string) rgRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.c.Killed:
			cancel()
		case <-ctx.Done():
		}
	}()
	cmd := exec.CommandContext(ctx, "rg", args...)
	cmd.Env = append(p.c.Env, "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout = &out
	err := spawn(cmd, cmd.Start)
	if err == nil {
		err = cmd.Wait()
	}
	p.last = rgRun{code: cmd.ProcessState.ExitCode(), out: out.Bytes()}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		p.last.code = -1
	}
	return p.last
}

// only reports that rg exited with code and printed exactly one record
// (path, NUL, a count, newline) for each of paths, in any order, and
// nothing else.
func (r rgRun) only(code int, paths ...string) bool {
	if r.code != code {
		return false
	}
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	rest := r.out
	for len(rest) > 0 {
		path, after, ok := bytes.Cut(rest, []byte{0})
		if !ok {
			return false
		}
		count, next, ok := bytes.Cut(after, []byte{'\n'})
		if !ok || len(count) == 0 || len(bytes.Trim(count, "0123456789")) > 0 || !want[string(path)] {
			return false
		}
		delete(want, string(path))
		rest = next
	}
	return len(want) == 0
}
