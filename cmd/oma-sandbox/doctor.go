package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session/local"
)

type backendReport struct {
	Name   string  `json:"name"`
	Usable bool    `json:"usable"`
	Checks []check `json:"checks"`
}

type doctorReport struct {
	// Auto is the backend `--backend auto` picks, "" when none is usable.
	Auto     string          `json:"auto"`
	Backends []backendReport `json:"backends"`
}

func runDoctor(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("doctor", "[--json]", `Reports which backends are usable on this host and, for each check that
fails, why. msb needs its binary, msb's own "msb doctor" to pass (the CPU's
virtualization, /dev/kvm, libkrunfw) and the session image in its cache;
its version is reported against the tested range. The local backend needs bubblewrap that really isolates (proven by running a
sandbox), ripgrep for the grep tool, and cgroups for the memory, processes
and cpu limits (only when those limits are asked for).

Exit status: 0 when at least one backend is usable, 1 when none is.`)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &usageError{msg: fmt.Sprintf("doctor takes no arguments, got %q", rest), usage: usage(fs)}
	}
	stop := c.spinner("probing the local sandbox")
	caps := local.Probe(ctx)
	stop()
	msbR := backendReport{Name: backendMsb, Checks: c.msbChecks(ctx, "")}
	msbR.Usable = usable(msbR.Checks)
	localR := backendReport{Name: backendLocal, Checks: localChecks(caps)}
	localR.Usable = usable(localR.Checks)
	rep := doctorReport{Backends: []backendReport{msbR, localR}}
	switch {
	case msbR.Usable:
		rep.Auto = backendMsb
	case localR.Usable:
		rep.Auto = backendLocal
	}
	if *asJSON {
		if err := writeJSON(c.stdout, rep); err != nil {
			return err
		}
	} else {
		for _, b := range rep.Backends {
			state := "usable"
			if !b.Usable {
				state = "NOT usable"
			}
			fmt.Fprintf(c.stdout, "%s: %s\n", b.Name, state)
			for _, ch := range b.Checks {
				fmt.Fprintf(c.stdout, "  %-4s %-11s %s\n", ch.Status, ch.Name, ch.Detail)
			}
		}
		if rep.Auto == "" {
			fmt.Fprintln(c.stdout, "auto: no usable backend")
		} else {
			fmt.Fprintf(c.stdout, "auto: %s\n", rep.Auto)
		}
	}
	if rep.Auto == "" {
		return exitCode(exitFailure)
	}
	return nil
}

// localChecks turns the local probe's evidence into checks. Filesystem,
// network and process isolation must be proven for the default policy;
// cgroups only matter for the limits that need them.
func localChecks(caps local.Capabilities) []check {
	var out []check
	if caps.Backend == "" {
		out = append(out, failCheck("bubblewrap", "no working sandbox: "+caps.Filesystem.Detail))
	} else {
		out = append(out, okCheck("bubblewrap", caps.Platform+", "+caps.Backend))
	}
	for _, ctl := range []struct {
		name string
		c    local.Control
	}{{"filesystem", caps.Filesystem}, {"network", caps.Network}, {"process", caps.Process}} {
		if ctl.c.Evidence == local.EvidenceFull {
			out = append(out, okCheck(ctl.name, ctl.c.Detail))
		} else {
			out = append(out, failCheck(ctl.name, fmt.Sprintf("%s evidence: %s", ctl.c.Evidence, ctl.c.Detail)))
		}
	}
	if p, err := exec.LookPath("rg"); err != nil {
		out = append(out, failCheck("ripgrep", "rg not found; the grep tool needs it (Debian: apt-get install ripgrep)"))
	} else {
		out = append(out, okCheck("ripgrep", p))
	}
	var have, missing []string
	for _, k := range []string{local.LimitMemory, local.LimitProcesses, local.LimitCPU} {
		if caps.Limits[k].Evidence == local.EvidenceFull {
			have = append(have, k)
		} else {
			missing = append(missing, k+" ("+caps.Limits[k].Detail+")")
		}
	}
	if len(missing) == 0 {
		out = append(out, okCheck("cgroups", "enforced: "+strings.Join(have, ", ")))
	} else {
		out = append(out, warnCheck("cgroups", "--limit refused for: "+strings.Join(missing, "; ")))
	}
	return out
}
