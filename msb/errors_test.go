package msb

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                                  "plain",
		"\x1b[1;31merror:\x1b[0m x":              "error: x",
		"\x1b[38;5;196mred\x1b[m":                "red",
		"\x1b]8;;http://x\x07link\x1b]8;;\x1b\\": "link",
		"a\r\nb":                                 "a\nb",
		"\x1b(Bx":                                "x",
		"trailing\x1b":                           "trailing",
		"\x1b[":                                  "",
		"\x1b]unterminated":                      "",
	} {
		if got := StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		msg    string
		kind   error
	}{
		{"sandbox not found", []string{"remove", "box1"}, 1, "error: sandbox not found: box1\n", "sandbox not found: box1", ErrSandboxNotFound},
		{"volume not found", []string{"volume", "remove", "v1"}, 1, "error: volume not found: v1\n", "volume not found: v1", ErrVolumeNotFound},
		{"sandbox exists", []string{"create", "alpine", "--name", "box1"}, 1, "error: sandbox already exists: box1", "sandbox already exists: box1", ErrAlreadyExists},
		{"volume exists", []string{"volume", "create", "--name", "v1"}, 1, "error: volume already exists: v1\n", "volume already exists: v1", ErrAlreadyExists},
		{"attached", []string{"volume", "remove", "v1"}, 1, `error: invalid config: volume "v1" is attached to active sandbox "box1"` + "\n",
			`invalid config: volume "v1" is attached to active sandbox "box1"`, ErrVolumeAttached},
		{"exec timeout", []string{"exec", "--timeout", "10s", "box1", "--", "sleep", "60"}, 1, "partial\nerror: exec timed out after 10s\n",
			"exec timed out after 10s", ErrExecTimedOut},
		{"cannot start 127", []string{"exec", "box1", "--", "nope"}, 127, "error: failed to exec \"nope\"\nhint: is it installed?\n",
			`failed to exec "nope"`, ErrCannotStart},
		{"cannot start 126", []string{"exec", "box1", "--", "/etc/passwd"}, 126, "error: failed to exec \"/etc/passwd\"\n",
			`failed to exec "/etc/passwd"`, ErrCannotStart},
		{"failed to exec with exit 1 is not classified", []string{"exec", "box1", "--", "x"}, 1, "error: failed to exec \"x\"\n", `failed to exec "x"`, nil},
		{"last error line wins", []string{"remove", "box1"}, 1, "error: volume not found: box1\nwarn\nerror: sandbox not found: box1\n", "sandbox not found: box1", ErrSandboxNotFound},
		{"name must be ours", []string{"remove", "box1"}, 1, "error: sandbox not found: other\n", "sandbox not found: other", nil},
		{"timeout only for exec", []string{"stop", "box1"}, 1, "error: exec timed out after 10s\n", "exec timed out after 10s", nil},
		{"guest exit", []string{"exec", "box1", "--", "false"}, 1, "some guest text\n", "", nil},
		{"indented is not msb", []string{"remove", "box1"}, 1, "  error: sandbox not found: box1\n", "", nil},
		{"CRLF", []string{"remove", "box1"}, 1, "error: sandbox not found: box1\r\n", "sandbox not found: box1", ErrSandboxNotFound},
		{"failed start keeps its hints", []string{"create", "img", "--name", "box1"}, 1,
			"error: failed to start \"box1\"\n  → other: sandbox process exited\n  → run `msb logs --source system box1` for full diagnostics\n",
			"failed to start \"box1\" → other: sandbox process exited → run `msb logs --source system box1` for full diagnostics", ErrStartFailed},
		{"hints end at other text", []string{"start", "box1"}, 1, "error: failed to start \"box1\"\n  → cause\nguest text\n  → not msb's\n",
			"failed to start \"box1\" → cause", ErrStartFailed},
		{"failed start of another sandbox", []string{"create", "img", "--name", "box1"}, 1, "error: failed to start \"box2\"\n", "failed to start \"box2\"", nil},
		{"exists, msb 0.6.18", []string{"create", "img", "--name", "box1"}, 1,
			"error: sandbox already exists: sandbox 'box1' already exists; remove it, start the stopped sandbox, or recreate with .replace()\n",
			"sandbox already exists: sandbox 'box1' already exists; remove it, start the stopped sandbox, or recreate with .replace()", ErrAlreadyExists},
		{"exists, another sandbox", []string{"create", "img", "--name", "box1"}, 1,
			"error: sandbox already exists: sandbox 'box2' already exists\n", "sandbox already exists: sandbox 'box2' already exists", nil},
		{"start of a running sandbox, msb 0.6.18", []string{"start", "box1"}, 1, "error: sandbox still running: cannot start sandbox 'box1': already running\n",
			"sandbox still running: cannot start sandbox 'box1': already running", ErrStillRunning},
		{"remove of a running sandbox, msb 0.6.18", []string{"remove", "box1"}, 1, "error: sandbox still running: cannot remove sandbox 'box1': still running\n",
			"sandbox still running: cannot remove sandbox 'box1': still running", ErrStillRunning},
		{"another sandbox still running", []string{"start", "box1"}, 1, "error: sandbox still running: cannot start sandbox 'box2': already running\n",
			"sandbox still running: cannot start sandbox 'box2': already running", nil},
		{"copy operand names the sandbox", []string{"copy", "box1:/etc/motd", "/tmp/x"}, 1, "error: sandbox not found: box1\n", "sandbox not found: box1", ErrSandboxNotFound},
		{"host side of a copy is no name", []string{"copy", "/tmp/box1:/x", "box2:/y"}, 1, "error: sandbox not found: box1\n", "sandbox not found: box1", nil},
		{"image not cached", []string{"create", "nope:1", "--name", "b"}, 1, "error: image error: image not cached: docker.io/library/nope:1\n",
			"image error: image not cached: docker.io/library/nope:1", ErrImageNotCached},
		{"image not found", []string{"image", "inspect", "capture/x:1", "--format", "json"}, 1, "error: image not found: capture/x:1\n",
			"image not found: capture/x:1", ErrImageNotCached},
		{"no metrics, msb 0.6.18", []string{"metrics", "box1", "--format", "json"}, 1, "error: no metrics recorded for sandbox \"box1\"\n",
			"no metrics recorded for sandbox \"box1\"", ErrNoMetrics},
		{"no metrics of another sandbox", []string{"metrics", "box1", "--format", "json"}, 1, "error: no metrics recorded for sandbox \"box2\"\n",
			"no metrics recorded for sandbox \"box2\"", nil},
		{"no metrics only from metrics", []string{"exec", "box1", "--", "true"}, 1, "error: no metrics recorded for sandbox \"box1\"\n",
			"no metrics recorded for sandbox \"box1\"", nil},
		{"install lease held, msb 0.6.18", []string{"list", "--format", "json"}, 1, "error: " + leaseRefusal + "\n", leaseRefusal, ErrInstallInProgress},
		{"install lease taken by another", []string{"volume", "list"}, 1,
			"error: runtime error: another microsandbox install operation is in progress until 2026-12-06 07:34:53\n",
			"runtime error: another microsandbox install operation is in progress until 2026-12-06 07:34:53", ErrInstallInProgress},
		{"install lease after guest output is the guest's", []string{"exec", "box1", "--", "sh"}, 1, "guest\nerror: " + leaseRefusal + "\n", leaseRefusal, nil},
		{"install lease with a bad time", []string{"list"}, 1, "error: runtime error: microsandbox install operation in progress until soon; retry after it completes\n",
			"runtime error: microsandbox install operation in progress until soon; retry after it completes", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, kind := classify(tt.args, tt.code, []byte(StripANSI(tt.stderr)))
			if msg != tt.msg || kind != tt.kind {
				t.Errorf("classify = %q, %v; want %q, %v", msg, kind, tt.msg, tt.kind)
			}
		})
	}
}

// leaseRefusal is what msb 0.6.18 says while its install lease is held.
const leaseRefusal = "runtime error: microsandbox install operation in progress until 2026-12-06 07:34:53.784087508; retry after it completes"

func TestInstallLeaseRetryAt(t *testing.T) {
	e := newExitError([]string{"list"}, 1, []byte("error: "+leaseRefusal+"\n"), true)
	want := time.Date(2026, 12, 6, 7, 34, 53, 784087508, time.UTC)
	if !errors.Is(e, ErrInstallInProgress) || !e.RetryAt.Equal(want) {
		t.Fatalf("Kind %v, RetryAt %v; want ErrInstallInProgress at %v", e.Kind, e.RetryAt, want)
	}
	if got := e.Error(); !strings.Contains(got, "refuses every command until 2026-12-06T07:34:53Z") {
		t.Errorf("Error() = %q, does not say until when msb refuses", got)
	}
	e = newExitError([]string{"exec", "box1", "--", "sh"}, 1, []byte("error: "+leaseRefusal+"\n"), false)
	if e.Kind != nil || !e.RetryAt.IsZero() {
		t.Errorf("with output on stdout the refusal is the guest's; got %v, %v", e.Kind, e.RetryAt)
	}
	e = newExitError([]string{"remove", "box1"}, 1, []byte("error: sandbox not found: box1\n"), true)
	if !e.RetryAt.IsZero() || strings.Contains(e.Error(), "refuses") {
		t.Errorf("another error has RetryAt %v, text %q", e.RetryAt, e.Error())
	}
}

func TestExitErrorText(t *testing.T) {
	e := &ExitError{Args: []string{"remove", "box1"}, ExitCode: 1, Message: "sandbox not found: box1", Kind: ErrSandboxNotFound}
	if got, want := e.Error(), "msb remove: exit 1: sandbox not found: box1"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, ErrSandboxNotFound) || errors.Is(e, ErrVolumeNotFound) {
		t.Error("errors.Is does not follow Kind")
	}

	e = &ExitError{Args: []string{"volume", "remove", "v"}, ExitCode: 2, Stderr: []byte("line1\n\nline2\nusage: msb volume remove\n")}
	if got, want := e.Error(), "msb volume remove: exit 2: line1; line2; usage: msb volume remove"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}

	e = &ExitError{Args: []string{"exec", "b", "--", "x"}, ExitCode: 3}
	if got, want := e.Error(), "msb exec: exit 3"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}

	e = &ExitError{Args: []string{"exec"}, ExitCode: -1}
	if got := e.Error(); !strings.Contains(got, "signal") {
		t.Errorf("Error() = %q, want a signal mention", got)
	}

	e = &ExitError{Args: []string{"exec"}, ExitCode: 1, Stderr: []byte(strings.Repeat("x", 10000) + "\nthe end\n")}
	if got := e.Error(); len(got) > maxDetail+64 || !strings.HasSuffix(got, "the end") {
		t.Errorf("Error() not bounded to the tail: %d bytes, %q...", len(got), got[:40])
	}
	e = &ExitError{Args: []string{"exec"}, ExitCode: 1, Message: strings.Repeat("é", 1000)}
	if got := e.Error(); len(got) > maxDetail+64 || !strings.HasSuffix(got, "é...") {
		t.Errorf("long message not cut on a rune boundary: %q", got[len(got)-10:])
	}
}

func TestTypedErrors(t *testing.T) {
	o := &OverflowError{Args: []string{"exec"}, Limit: 10}
	if !errors.Is(o, ErrOutputOverflow) || !strings.Contains(o.Error(), "10 bytes") {
		t.Errorf("OverflowError = %v", o)
	}
	p := &ParseError{Output: "list", Index: 2, Field: "created_at", Reason: "is missing"}
	if !errors.Is(p, ErrMalformedOutput) || p.Error() != `msb list output, entry 2, field "created_at": is missing` {
		t.Errorf("ParseError = %v", p)
	}
	if !errors.Is(invalid("x", "y", "z"), ErrInvalid) {
		t.Error("ValidationError does not match ErrInvalid")
	}
}
