package main

import (
	"context"
	"fmt"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
)

type doctorReport = omasandbox.Report

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
	stop := c.spinner("probing the backends")
	rep := omasandbox.Doctor(ctx, omasandbox.DoctorOptions{Msb: c.msbPath, Logger: c.logger})
	stop()
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
