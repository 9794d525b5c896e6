package local

import (
	"regexp"
	"sort"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// secretName matches variable names that must never reach a command.
var secretName = regexp.MustCompile(`(?i)(token|secret|password|credential|api[_-]?key|authorization|cookie)`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// guestUID is the unprivileged identity commands run as, the msb image's.
const guestUID = 65534

// guestPath is the command search path inside the sandbox; the caller's
// PATH never reaches it.
const guestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// scrubEnv validates the caller's extra variables and drops every one whose
// name looks like a secret. It returns the kept variables and the names it
// dropped.
func scrubEnv(env map[string]string) (kept map[string]string, dropped []string, err error) {
	kept = map[string]string{}
	for k, v := range env {
		if !envName.MatchString(k) {
			return nil, nil, &PolicyError{Field: "environment variable", Value: k, Reason: "not a valid name"}
		}
		if k == "PATH" {
			return nil, nil, &PolicyError{Field: "environment variable", Value: k, Reason: "the sandbox's PATH is fixed"}
		}
		if secretName.MatchString(k) {
			dropped = append(dropped, k)
			continue
		}
		kept[k] = v
	}
	sort.Strings(dropped)
	return kept, dropped, nil
}

// guestEnv is the whole environment of a command: the image's defaults
// (HOME and TMPDIR at the workspace, as in the msb image), then the
// session's scrubbed variables, sorted for stable argv.
func guestEnv(p session.Paths, extra map[string]string) []string {
	env := map[string]string{
		"HOME":   p.Workspace,
		"TMPDIR": p.Workspace,
		"PATH":   guestPath,
		"LANG":   "C.UTF-8",
		// As in the image: no stale __pycache__ in the workspace.
		"PYTHONDONTWRITEBYTECODE": "1",
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
