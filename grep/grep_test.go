//go:build linux

package grep

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func needTools(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	rg, err := exec.LookPath("rg")
	if err != nil {
		t.Skip("rg not installed")
	}
	return rg
}

// builtinCommand runs the guest agent's builtin name with args, an rg
// from path first on its PATH when path is set.
func builtinCommand(t *testing.T, name string, args []string, path string) *exec.Cmd {
	cmd := exec.Command(agenttest.AgentBinary(t), append([]string{"builtin", name}, args...)...)
	if path != "" {
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return cmd
}

// fakeRg returns a directory holding an rg that runs body, with $real
// naming the real rg.
func fakeRg(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/bash\nreal=" + strconv.Quote(needTools(t)) + "\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, "rg"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// run runs the grep-search builtin and returns its output and exit status.
func run(t *testing.T, root, pattern, globPattern, path string) ([]byte, int) {
	t.Helper()
	rgGlob := ""
	if globPattern != "" {
		rgGlob = glob.ToRipgrep(globPattern)
	}
	out, err := builtinCommand(t, agentwire.BuiltinGrepSearch, SearchArgs(root, NewToken(), pattern, rgGlob), path).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out, exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out, 0
}

// parse reads the search's output the way the tool does.
func parse(t *testing.T, out []byte, opts CollectorOptions) ([]string, error) {
	t.Helper()
	f := NewReadinessFilter()
	rest, err := f.Push(out)
	if err == nil {
		err = f.Finish()
	}
	if err != nil {
		return nil, err
	}
	c, err := NewCollector(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(rest); err != nil {
		return c.Matches(), err
	}
	return c.Matches(), c.Finish()
}

func search(t *testing.T, root, pattern, globPattern, path string, opts CollectorOptions) ([]string, int, error) {
	t.Helper()
	out, code := run(t, root, pattern, globPattern, path)
	opts.Root = root
	got, err := parse(t, out, opts)
	return got, code, err
}

func TestSearch(t *testing.T) {
	needTools(t)
	root := writeTree(t, map[string]string{
		"a.md":              "the needle\n",
		"b.txt":             "needle too\n",
		"none.md":           "nothing here\n",
		".hidden.md":        "needle\n",
		".ignore":           "ignored.md\n",
		"ignored.md":        "needle\n",
		"sub/c.md":          "needle\n",
		"sub/deep/d.md":     "needle\n",
		"node_modules/m.md": "needle\n",
		"binary-late.md":    "needle first\x00then binary\n",
		"binary-early.md":   "\x00needle\n",
		// The NUL lies beyond ripgrep's 64 KiB read buffer.
		"binary-far.md":       "needle first\n" + strings.Repeat("text\n", 20000) + "\x00",
		"sp ace/new\nline.md": "needle\n",
	})
	// Below root: a FIFO (never opened: it would block) and a symbolic link
	// to a file outside (never followed).
	if err := syscall.Mkfifo(filepath.Join(root, "sub", "fifo.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := writeTree(t, map[string]string{"secret.md": "needle\n"})
	if err := os.Symlink(filepath.Join(outside, "secret.md"), filepath.Join(root, "link.md")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, pattern, glob string
		opts                CollectorOptions
		want                []string
	}{
		{"all", "needle", "", CollectorOptions{Base: root}, []string{`"sp ace/new\nline.md"`, ".hidden.md", "a.md", "b.txt", "ignored.md", "node_modules/m.md", "sub/c.md", "sub/deep/d.md"}},
		{"glob", "needle", "*.md", CollectorOptions{Base: root}, []string{`"sp ace/new\nline.md"`, ".hidden.md", "a.md", "ignored.md", "node_modules/m.md", "sub/c.md", "sub/deep/d.md"}},
		{"glob depth", "needle", "sub/*.md", CollectorOptions{}, []string{root + "/sub/c.md"}},
		{"glob braces", "needle", "{a,b}.*", CollectorOptions{}, []string{root + "/a.md", root + "/b.txt"}},
		{"regex", "^needle$", "", CollectorOptions{Base: root}, []string{`"sp ace/new\nline.md"`, ".hidden.md", "ignored.md", "node_modules/m.md", "sub/c.md", "sub/deep/d.md"}},
		{"no match", "absent", "", CollectorOptions{}, nil},
		{"file root", "needle", "", CollectorOptions{}, nil},
		{"binary file root", "needle", "", CollectorOptions{}, nil},
		{"binary file root, NUL far", "needle", "", CollectorOptions{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := root
			switch c.name {
			case "file root":
				dir = root + "/a.md"
				c.want = []string{dir}
			case "binary file root":
				dir = root + "/binary-late.md"
			case "binary file root, NUL far":
				dir = root + "/binary-far.md"
			}
			got, code, err := search(t, dir, c.pattern, c.glob, "", c.opts)
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v", code, err)
			}
			if slices.Sort(got); !slices.Equal(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestSearchHeadLimit(t *testing.T) {
	needTools(t)
	files := map[string]string{}
	for i := range DefaultHeadLimit + 10 {
		files["f"+strconv.Itoa(i)+".txt"] = "needle\n"
	}
	root := writeTree(t, files)
	out, code := run(t, root, "needle", "", "")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for limit, want := range map[int]int{7: 7, 0: DefaultHeadLimit, DefaultHeadLimit: DefaultHeadLimit} {
		got, err := parse(t, out, CollectorOptions{Root: root, HeadLimit: limit})
		if err != nil || len(got) != want {
			t.Fatalf("head limit %d: %d matches, %v", limit, len(got), err)
		}
	}
}

// A file that vanishes during the walk (a concurrent write's temporary file
// renamed into place) makes ripgrep complain and exit 2; the search still
// succeeds with what it found.
func TestSearchFileVanishes(t *testing.T) {
	needTools(t)
	root := writeTree(t, map[string]string{"a.txt": "needle\n", "b.txt": "needle\n"})
	vanish := fakeRg(t, `case " $* " in *" --count "*) rm -f -- "${!#}/a.txt"; "$real" "$@"; echo "rg: ${!#}/gone.txt: No such file or directory (os error 2)" >&2; exit 2 ;; esac; exec "$real" "$@"`)
	got, code, err := search(t, root, "needle", "", vanish, CollectorOptions{})
	if err != nil || code != 0 || !slices.Equal(got, []string{root + "/b.txt"}) {
		t.Fatalf("got %q, exit %d, %v; want only b.txt", got, code, err)
	}
}

// A file the guest user cannot read is not a failure: ripgrep says so on
// stderr (the tool's "Could not search" note) and the others are listed.
func TestSearchUnreadableFile(t *testing.T) {
	needTools(t)
	root := writeTree(t, map[string]string{"a.txt": "needle\n", "secret.txt": "needle\n"})
	if err := os.Chmod(filepath.Join(root, "secret.txt"), 0); err != nil {
		t.Fatal(err)
	}
	cmd := builtinCommand(t, agentwire.BuiltinGrepSearch, SearchArgs(root, NewToken(), "needle", ""), "")
	if os.Geteuid() == 0 {
		// root reads anything: search as nobody, who needs a way to root.
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root without setpriv")
		}
		// t.TempDir makes root and its parent private.
		for _, d := range []string{filepath.Dir(root), root} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for d := filepath.Dir(root); d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
				t.Skipf("%s is closed to others", d)
			}
		}
		cmd = exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, cmd.Args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	got, err := parse(t, out, CollectorOptions{Root: root})
	if err != nil || !slices.Equal(got, []string{root + "/a.txt"}) || !strings.Contains(stderr.String(), "secret.txt: Permission denied") {
		t.Fatalf("got %q, %v; stderr %q", got, err, stderr.String())
	}
}

func TestSearchFailures(t *testing.T) {
	needTools(t)
	root := writeTree(t, map[string]string{"a.txt": "needle\n"})
	cases := []struct {
		name, root, pattern, path string
		code                      int
	}{
		{"invalid regex", root, "[", "", 2},
		{"missing root", root + "/missing", "needle", "", 2},
		{"NUL check of a file root fails: the search decides", root + "/a.txt", "needle", fakeRg(t, `[ "$2" = -qa ] && exit 3; exec "$real" "$@"`), 0},
		{"search fails after a match", root, "needle", fakeRg(t, `"$real" "$@"; [ "$2" = -qa ] || exit 4`), 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, code, err := search(t, c.root, c.pattern, "", c.path, CollectorOptions{})
			if err != nil || code != c.code {
				t.Fatalf("exit %d, %v; want exit %d after readiness", code, err, c.code)
			}
		})
	}
}

func tagged(t *testing.T, entry string) []int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), entry) {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

func TestCleanupEndsSearch(t *testing.T) {
	needTools(t)
	// An rg that never ends, with a child of its own.
	never := fakeRg(t, `sleep 30 & sleep 30; wait`)
	token := NewToken()
	if !regexp.MustCompile(`^oma-grep-[0-9a-f-]{36}$`).MatchString(token) {
		t.Fatalf("token %q", token)
	}
	entry := OwnerEnv + "=" + token
	cmd := builtinCommand(t, agentwire.BuiltinGrepSearch, SearchArgs(t.TempDir(), token, "needle", ""), never)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range tagged(t, entry) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if marker, err := bufio.NewReader(stdout).ReadString(0); err != nil || marker != ReadyMarker+"\x00" {
		t.Fatalf("marker %q, %v", marker, err)
	}
	// The marker came from work already tagged, so cleanup can find it.
	if len(tagged(t, entry)) == 0 {
		t.Fatal("readiness was published by untagged work")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(tagged(t, entry)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("tagged: %v", tagged(t, entry))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out, err := builtinCommand(t, agentwire.BuiltinSearchKill, CleanupArgs(token), "").CombinedOutput(); err != nil {
		t.Fatalf("cleanup: %v: %s", err, out)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the search ended cleanly although it was killed")
	}
	if pids := tagged(t, entry); len(pids) > 0 {
		t.Fatalf("tagged processes remain: %v", pids)
	}
}

// The agent's grep-preflight builtin (run in every new msb sandbox by
// prepare) accepts the real rg and names what is wrong with each broken one.
func TestPreflight(t *testing.T) {
	needTools(t)
	cases := []struct {
		name, rg, msg string // rg "" is the real one
	}{
		{"real rg", "", ""},
		{"no match exits 0", `"$real" "$@"; c=$?; [ "$c" -eq 1 ] && exit 0; exit "$c"`, "no match exits 0, not 1"},
		{"invalid regex exits 1", `"$real" "$@"; c=$?; [ "$c" -eq 2 ] && exit 1; exit "$c"`, "an invalid regex exits 1"},
		{"newline output", `"$real" "$@" | tr '\0' '\n'; exit "${PIPESTATUS[0]}"`, "a match is not listed as one record of path, NUL, count and newline"},
		{"trailing junk", `"$real" "$@"; c=$?; printf x; exit "$c"`, "a match is not listed as one record of path, NUL, count and newline"},
		{"paths without counts", `args=(); for a in "$@"; do [ "$a" = --count ] && a=--files-with-matches; args+=("$a"); done; exec "$real" "${args[@]}"`, "a match is not listed as one record of path, NUL, count and newline"},
		{"lists binary files", `[ "$2" = -qa ] || set -- --binary "$@"; exec "$real" "$@"`, "a directory search lists binary files (exit 0)"},
		{"skips hidden files", `args=(); for a in "$@"; do [ "$a" = --hidden ] || args+=("$a"); done; exec "$real" "${args[@]}"`, "a directory search does not list exactly the hidden, ignored and plain matches"},
		{"respects ignore files", `args=(); for a in "$@"; do [ "$a" = --no-ignore ] || args+=("$a"); done; exec "$real" "${args[@]}"`, "a directory search does not list exactly the hidden, ignored and plain matches"},
		{"ignores --glob", `args=(); skip=0; for a in "$@"; do if [ "$skip" = 1 ]; then skip=0; elif [ "$a" = --glob ]; then skip=1; else args+=("$a"); fi; done; exec "$real" "${args[@]}"`, "a search does not honour --glob"},
		{"blind to NUL", `[ "$2" = -qa ] && exit 1; exec "$real" "$@"`, "NUL detection in a binary file exits 1"},
		{"NUL everywhere", `[ "$2" = -qa ] && exit 0; exec "$real" "$@"`, "NUL detection in a text file exits 0"},
		{"missing", `exit 127`, "a match is not listed as one record of path, NUL, count and newline"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := ""
			if c.rg != "" {
				path = fakeRg(t, c.rg)
			}
			work := t.TempDir()
			out, err := builtinCommand(t, agentwire.BuiltinGrepPreflight, []string{work}, path).CombinedOutput()
			if c.msg == "" {
				if err != nil {
					t.Fatalf("preflight: %v: %s", err, out)
				}
			} else if err == nil || string(out) != "grep preflight: "+c.msg+"\n" {
				t.Fatalf("preflight: %v: %q, want %q", err, out, c.msg)
			}
			if left, _ := os.ReadDir(work); len(left) > 0 {
				t.Fatalf("preflight left %v behind", left)
			}
		})
	}
}

func TestCollectorTexts(t *testing.T) {
	c, err := NewCollector(CollectorOptions{Root: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	long := "/w/" + strings.Repeat("n", 4000) + "\x001\n"
	if err := c.Push([]byte(strings.Repeat(long, 17))); err == nil || err.Error() != "Grep output exceeds 65536 bytes" {
		t.Fatalf("output limit: %v", err)
	}
	c, err = NewCollector(CollectorOptions{Root: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push([]byte("/w/" + strings.Repeat("n", MaxRawBytes))); err == nil || err.Error() != "Grep output exceeds 1048576 raw bytes" {
		t.Fatalf("raw limit: %v", err)
	}
	c, err = NewCollector(CollectorOptions{Root: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push([]byte("/etc/passwd\x001\n")); !errors.Is(err, glob.ErrMalformed) {
		t.Fatalf("path outside root: %v", err)
	}
	for stream, want := range map[string]string{
		"/w/a\x00/w/b\x001\n": "Grep output holds a path without its match count",
		"/w/a\x00\n":          "Grep output holds a path without its match count",
		"/w/a\x00" + strings.Repeat("1", 21) + "\n": "Grep output holds a path without its match count",
		"/w/a\x0012": "Grep output ended inside a record",
		"/w/a\x00" + strings.Repeat("9", 20) + "\n/w/b\x00": "Grep output ended inside a record",
		"/w/a\x001\n/w/b": "Grep output ended inside a path",
	} {
		c, err := NewCollector(CollectorOptions{Root: "/w"})
		if err != nil {
			t.Fatal(err)
		}
		if err = c.Push([]byte(stream)); err == nil {
			err = c.Finish()
		}
		if !errors.Is(err, glob.ErrMalformed) || err.Error() != want {
			t.Fatalf("%q: %v, want %q", stream, err, want)
		}
	}
}
