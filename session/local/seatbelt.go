package local

import (
	"fmt"
	"strings"
)

// seatbeltReadPaths are the system trees a command may read on macOS.
var seatbeltReadPaths = []string{"/System", "/usr", "/bin", "/sbin", "/Library", "/private/etc", "/private/var/db/timezone", "/opt/homebrew"}

// seatbeltSpec is one sandbox-exec invocation. Paths must be physical
// (no symlinks): Seatbelt matches the resolved path.
type seatbeltSpec struct {
	Mode      Mode
	Network   Network
	Workspace string
	Uploads   string
	Outputs   string
	// Root is set when preparing uploads and skills: all three session
	// directories become writable, as they are to root on Linux.
	Root    bool
	Env     []string
	Command []string
}

// profile renders the Seatbelt profile: deny by default, system paths and
// the session's directories readable, the workspace and outputs writable
// in workspace-write, no network under deny. Danger mode allows all.
func (s seatbeltSpec) profile() (string, error) {
	if s.Mode == ModeDangerFullAccess {
		return "(version 1)\n(allow default)", nil
	}
	for _, p := range []string{s.Workspace, s.Uploads, s.Outputs} {
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\"\\\x00\n\r\t") {
			return "", &PolicyError{Field: "seatbelt path", Value: p, Reason: "must be absolute and free of quotes, backslashes and control characters"}
		}
	}
	q := func(p string) string { return `"` + p + `"` }
	lines := []string{
		"(version 1)",
		"(deny default)",
		`(import "system.sb")`,
		"(allow process-exec)",
		"(allow process-fork)",
		"(allow signal (target same-sandbox))",
		"(allow sysctl-read)",
		"(allow mach-lookup)",
		"(allow file-read-metadata)",
	}
	if s.Network == NetworkUnrestricted {
		lines = append(lines, "(allow network*)")
	} else {
		lines = append(lines, "(deny network*)")
	}
	for _, p := range seatbeltReadPaths {
		lines = append(lines, fmt.Sprintf("(allow file-read* (subpath %s))", q(p)))
	}
	lines = append(lines,
		`(allow file-read* file-write-data (literal "/dev/null") (literal "/dev/zero"))`,
		`(allow file-read* (literal "/dev/urandom") (literal "/dev/random"))`,
		fmt.Sprintf("(allow file-read* (subpath %s) (subpath %s) (subpath %s))", q(s.Workspace), q(s.Uploads), q(s.Outputs)),
	)
	switch {
	case s.Root:
		lines = append(lines, fmt.Sprintf("(allow file-write* (subpath %s) (subpath %s) (subpath %s))", q(s.Workspace), q(s.Uploads), q(s.Outputs)))
	case s.Mode == ModeWorkspaceWrite:
		lines = append(lines, fmt.Sprintf("(allow file-write* (subpath %s) (subpath %s))", q(s.Workspace), q(s.Outputs)))
	}
	return strings.Join(lines, "\n"), nil
}

// argv is `sandbox-exec -p PROFILE /usr/bin/env -i VARS... COMMAND...`.
// BSD env takes no `--` after its assignments, so the command must not
// contain '=' in its first word; ours is always an absolute /bin path.
func (s seatbeltSpec) argv(sandboxExec string) ([]string, error) {
	prof, err := s.profile()
	if err != nil {
		return nil, err
	}
	if len(s.Command) == 0 || strings.Contains(s.Command[0], "=") {
		return nil, &PolicyError{Field: "seatbelt command", Value: strings.Join(s.Command, " "), Reason: "first word must be a path without '='"}
	}
	a := append([]string{sandboxExec, "-p", prof, "/usr/bin/env", "-i"}, s.Env...)
	return append(a, s.Command...), nil
}
