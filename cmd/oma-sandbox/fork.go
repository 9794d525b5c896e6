package main

import (
	"context"
	"fmt"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
)

func runSessionFork(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session fork", "NAME [--session-id ID] [--json]", `Makes a new session whose workspace is a copy of NAME's as it is now; the
two then diverge, and removing one never touches the other. Prints the new
session's name, or with --json what session create --json prints. msb: NAME
is stopped while its root disk is snapshotted and its workspace volume
copied, and started again if it was running; the fork has NAME's image and
root disk (what was installed outside the workspace too), its CPUs and
memory, no network and no ports. local: the fork keeps NAME's policy and
limits. Uploads and outputs start empty; a symlink in the workspace is
copied as a link, never followed.`)
	sessionID := fs.String("session-id", "", "the fork's session id (default: random)")
	asJSON := fs.Bool("json", false, "print the fork as JSON")
	names, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		return &usageError{msg: fmt.Sprintf("session fork needs exactly one NAME, got %q", names), usage: usage(fs)}
	}
	src, err := c.attachSession(ctx, names[0], omasandbox.Options{})
	if err != nil {
		return err
	}
	fork, err := src.Fork(ctx, *sessionID)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.stdout, describe(fork.Sandbox()))
	}
	fmt.Fprintln(c.stdout, fork.Name())
	return nil
}
