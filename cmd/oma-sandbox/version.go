package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
)

// buildInfo is what `version` reports: what a bug report needs to name
// the program exactly.
type buildInfo struct {
	Version  string `json:"version"`            // the module version, or (devel)
	Commit   string `json:"commit,omitempty"`   // the VCS revision built
	Modified bool   `json:"modified,omitempty"` // built from a tree with changes
	Time     string `json:"time,omitempty"`     // the commit's time
	Go       string `json:"go"`                 // the toolchain
	Platform string `json:"platform"`           // GOOS/GOARCH
	// Agents are the GOARCHes of the guest agents this build embeds
	// (make agent builds them); none when built without.
	Agents []string `json:"agents"`
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Agents: []string{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			case "vcs.time":
				b.Time = s.Value
			}
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		if bundle.Embedded(arch) {
			b.Agents = append(b.Agents, arch)
		}
	}
	return b
}

func runVersion(_ context.Context, c *cli, args []string) error {
	fs := c.flagSet("version", "[--json]", `Prints the version this binary was built from, its commit, its Go
toolchain and platform, and the guest agents it embeds (doctor says
whether a session can use one).`)
	asJSON := fs.Bool("json", false, "print the build as JSON")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &usageError{msg: fmt.Sprintf("version takes no arguments, got %q", rest), usage: usage(fs)}
	}
	b := currentBuild()
	if *asJSON {
		return writeJSON(c.stdout, b)
	}
	fmt.Fprintf(c.stdout, "oma-sandbox %s\n", b.Version)
	if b.Commit != "" {
		fmt.Fprintf(c.stdout, "commit %s", b.Commit)
		if b.Modified {
			fmt.Fprint(c.stdout, " (modified)")
		}
		if b.Time != "" {
			fmt.Fprintf(c.stdout, " %s", b.Time)
		}
		fmt.Fprintln(c.stdout)
	}
	fmt.Fprintf(c.stdout, "%s %s\n", b.Go, b.Platform)
	if len(b.Agents) == 0 {
		fmt.Fprintln(c.stdout, "guest agent: none embedded (make agent embeds them)")
	} else {
		fmt.Fprintf(c.stdout, "guest agent: embedded for linux/%s\n", strings.Join(b.Agents, ", linux/"))
	}
	return nil
}
