package outputs

import (
	"fmt"
	"slices"
	"strings"
)

// deniedNames are path segments an output may not contain unless the caller
// allows it: files and directories that make a host program run code or
// trust a setting when someone later works in the directory the outputs
// land in. It holds sandbox-runtime's mandatory deny list (its dangerous
// files, and its dangerous directories with the whole of .git and .claude
// rather than only hooks, config, commands and agents), the VCS and agent
// directories Codex keeps read-only (.git, .codex; .aws), and the other
// shells' rc files and direnv's .envrc. Matching is by whole segment and
// case-insensitive (Unicode simple folding, as case-insensitive host file
// systems compare names), and blind to trailing dots and spaces (which
// Windows and vfat drop), so "x/.GIT/config" and ".git./config" are
// refused too.
var deniedNames = []string{
	// version control: hooks, config (core.fsmonitor, aliases), submodules
	".git", ".hg", ".svn", ".jj", ".gitconfig", ".gitmodules",
	// editors and IDEs: tasks and settings that run commands
	".vscode", ".idea",
	// coding agents: settings, hooks, commands, MCP servers
	".claude", ".codex", ".cursor", ".mcp.json",
	// credentials and login: keys, authorized_keys, cloud config
	".ssh", ".aws",
	// shells and tools that read rc files on start or on cd
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zprofile", ".zshenv", ".zlogin", ".envrc", ".ripgreprc",
}

// DeniedNames returns the path segments refused in outputs by default.
func DeniedNames() []string { return slices.Clone(deniedNames) }

// Policy decides which listed outputs are collected.
type Policy struct {
	Limits
	// Allow names output paths (relative to the outputs root, as listed)
	// that the deny list would refuse: each collects itself and everything
	// below it. Allowing ".git" collects a whole repository.
	Allow []string
}

// CheckAllow reports whether every Allow entry is a path an output could
// have.
func (p Policy) CheckAllow() error {
	for _, a := range p.Allow {
		if reason := checkPath(a); reason != "" {
			return fmt.Errorf("allowed output path %q: %s", a, reason)
		}
	}
	return nil
}

// denied returns why rel is refused by the deny list, or "".
func (p Policy) denied(rel string) string {
	for _, a := range p.Allow {
		if rel == a || strings.HasPrefix(rel, a+"/") {
			return ""
		}
	}
	for seg := range strings.SplitSeq(rel, "/") {
		// Windows and vfat drop a name's trailing dots and spaces: ".git."
		// lands as ".git" there.
		seg = strings.TrimRight(seg, ". ")
		for _, d := range deniedNames {
			if strings.EqualFold(seg, d) {
				return fmt.Sprintf("%q may make host programs run code (a VCS, editor, agent or shell file); allow it by name to collect it", d)
			}
		}
	}
	return ""
}
