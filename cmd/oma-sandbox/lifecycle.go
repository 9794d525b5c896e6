package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// openLifecycle parses NAME and attaches to that session.
func (c *cli) openLifecycle(ctx context.Context, fs *flag.FlagSet, args []string) (*omasandbox.Session, string, error) {
	names, err := c.parse(fs, args)
	if err != nil {
		return nil, "", err
	}
	if len(names) != 1 {
		return nil, "", &usageError{msg: fmt.Sprintf("%s needs exactly one NAME, got %q", fs.Name(), names), usage: usage(fs)}
	}
	s, err := c.open(ctx, names[0])
	if err != nil {
		return nil, "", err
	}
	return s, names[0], nil
}

func runSessionPause(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session pause", "NAME", `Pauses a session, keeping its workspace. msb: stops the sandbox (msb stop),
which ends its VM and every process in it; the next tool call, or
'session resume NAME', starts it again. local: nothing runs between calls,
so there is nothing to stop; the command only checks the session exists.
Prints NAME.`)
	l, name, err := c.openLifecycle(ctx, fs, args)
	if err != nil {
		return err
	}
	if err := l.Pause(ctx); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, name)
	return nil
}

func runSessionResume(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session resume", "NAME", `Resumes a paused session (msb start); a running session, and any local
one, is left as it is. Prints NAME.`)
	l, name, err := c.openLifecycle(ctx, fs, args)
	if err != nil {
		return err
	}
	if err := l.Resume(ctx); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, name)
	return nil
}

func runSessionStats(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session stats", "NAME [--json]", `Reports what a session uses. msb: its VM's CPU, memory, disk and network
counters (msb metrics; none while the session is paused) and its workspace
volume's size. local: the workspace's disk use and, while its resident
sandbox runs, its uptime and (under a memory limit) its memory use. Text
output is one "key value" line per reported field.`)
	asJSON := fs.Bool("json", false, "print a JSON object")
	l, _, err := c.openLifecycle(ctx, fs, args)
	if err != nil {
		return err
	}
	st, err := l.Stats(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.stdout, st)
	}
	line := func(k string, v any) { fmt.Fprintf(c.stdout, "%s\t%v\n", k, v) }
	line("backend", st.Backend)
	line("state", st.State)
	line("sampled", st.Sampled.UTC().Format(time.RFC3339))
	if st.CPUs != nil {
		line("cpus", *st.CPUs)
	}
	if st.CPUPercent != nil {
		line("cpu_percent", fmt.Sprintf("%.1f", *st.CPUPercent))
	}
	for _, f := range []struct {
		key string
		v   *int64
	}{
		{"memory_bytes", st.MemoryBytes}, {"memory_limit_bytes", st.MemoryLimitBytes},
		{"disk_used_bytes", st.DiskUsedBytes}, {"root_disk_used_bytes", st.RootDiskBytes},
		{"disk_read_bytes", st.DiskReadBytes}, {"disk_write_bytes", st.DiskWriteBytes},
		{"net_rx_bytes", st.NetRxBytes}, {"net_tx_bytes", st.NetTxBytes},
	} {
		if f.v != nil {
			line(f.key, *f.v)
		}
	}
	if st.Uptime != nil {
		line("uptime", st.Uptime.Round(time.Second))
	}
	return nil
}

func runSessionResize(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session resize", "NAME [--cpus N] [--memory SIZE] [--restart | --next-start]", `Changes a session's CPUs or memory. msb (msb modify): a paused session
takes the change at its next start; a running one takes it live when it
fits what its VM booted with, and beyond that only with --restart (the VM
restarts now: its processes end, the workspace stays) or --next-start
(saved for the next resume); otherwise it fails and nothing changes.
local: every later call runs under the new limits (CPUs as a CPU quota,
memory as the memory limit). Prints NAME.`)
	var r session.Resize
	fs.IntVar(&r.CPUs, "cpus", 0, "virtual CPUs (local: a CPU quota of that many CPUs)")
	fs.StringVar(&r.Memory, "memory", "", "memory `size` such as 512M or 2G")
	fs.BoolVar(&r.Restart, "restart", false, "msb: restart a running session if the change needs it")
	fs.BoolVar(&r.NextStart, "next-start", false, "msb: save the change for the next resume, leaving a running session as it is")
	l, name, err := c.openLifecycle(ctx, fs, args)
	if err != nil {
		return err
	}
	if r.CPUs == 0 && r.Memory == "" {
		return &usageError{msg: "session resize needs --cpus or --memory", usage: usage(fs)}
	}
	if r.Restart && r.NextStart {
		return &usageError{msg: "--restart and --next-start exclude each other", usage: usage(fs)}
	}
	if err := l.Resize(ctx, r); err != nil {
		if errors.Is(err, session.ErrInvalid) {
			return &usageError{msg: err.Error()}
		}
		return err
	}
	fmt.Fprintln(c.stdout, name)
	return nil
}
