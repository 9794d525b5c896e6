package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// Exit status of run when its command timed out, as coreutils timeout.
const exitTimeout = 124

const defaultRunTimeout = 10 * time.Minute

func runRun(ctx context.Context, c *cli, args []string) (err error) {
	fs := c.flagSet("run", "[flags] [--] COMMAND [ARG...]", `Creates a session, runs COMMAND in its workspace through the bash tool
(the arguments joined with shell quoting into one bash command line), streams
the command's output (stdout and stderr combined) to stdout as it arrives,
collects the files it left in /mnt/session/outputs into the --outputs
directory (each one named on stderr, as is each entry refused, with its
reason), then removes the session. When the collection failed or refused
anything, the session is kept and the way to collect again is printed.
SIGINT and SIGTERM remove the session before oma-sandbox exits.

Exit status: the command's own; 124 when it timed out; 1 with a message on
stderr when oma-sandbox itself failed (creating, collecting, removing); 2
for a usage error, with nothing created; 128+N after signal N.`)
	var f createFlags
	f.register(fs)
	keep := fs.Bool("keep", false, "keep the session afterwards and print its name on stderr")
	outDir := fs.String("outputs", "outputs", "host `directory` for the collected output files")
	timeout := fs.Duration("timeout", defaultRunTimeout, "the command's time limit, 1s to 1h")
	var o collectFlags
	o.register(fs)
	argv, err := c.parseLeading(fs, args)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		return &usageError{msg: "run needs a COMMAND", usage: usage(fs)}
	}
	if *timeout < time.Second || *timeout > tools.MaxBashTimeout {
		return &usageError{msg: fmt.Sprintf("--timeout %v: want 1s to %v", *timeout, tools.MaxBashTimeout)}
	}
	if *outDir == "" {
		return &usageError{msg: "--outputs must name a directory"}
	}
	if err := checkDestDir("--outputs", *outDir); err != nil {
		return err
	}
	collectOpts, err := o.options()
	if err != nil {
		return err
	}
	p, err := c.resolve(ctx, &f, setFlags(fs))
	if err != nil {
		return err
	}
	// One command and its outputs: the guest agent's channel would cost
	// more to open than it saves.
	p.opts.OneExecPerCall = true
	s, err := c.create(ctx, p)
	if err != nil {
		return err
	}
	unfinished := false // the outputs were not all collected: keep the session
	defer func() {
		if unfinished {
			fmt.Fprintf(c.stderr, "oma-sandbox: kept session %s: its outputs were not all collected; collect again with\n"+
				"  oma-sandbox outputs %s --dest %s [--overwrite] [--allow PATH]...\nthen remove it with\n  oma-sandbox session rm %s\n",
				s.Name(), s.Name(), shellJoin([]string{*outDir}), s.Name())
			return
		}
		if *keep {
			fmt.Fprintf(c.stderr, "oma-sandbox: kept session %s\n", s.Name())
			return
		}
		if cerr := closeSession(ctx, s); cerr != nil {
			fmt.Fprintf(c.stderr, "oma-sandbox: %v\n", cerr)
			if err == nil || errors.As(err, new(exitCode)) {
				err = exitCode(exitFailure)
			}
		}
	}()

	out := newStreamed(c.stdout)
	// The session's own bash tool, so the call has its audit record and
	// span like any other.
	ran, runErr := s.Bash(ctx, shellJoin(argv), omasandbox.BashOptions{Timeout: *timeout, Progress: out.write})
	// What the session itself did to the command (a limit that killed a
	// process of it, a destination refused) is not in its output.
	for _, n := range out.sessionNotes(ran.Text) {
		fmt.Fprintf(c.stderr, "oma-sandbox: %s\n", printable(n))
	}
	status := exitOK
	switch {
	case ran.TimedOut:
		fmt.Fprintf(c.stderr, "oma-sandbox: command timed out after %v\n", *timeout)
		status = exitTimeout
	case runErr == nil:
		status = ran.ExitCode
	case interrupted(ctx) != nil:
		return interrupted(ctx)
	default:
		return fmt.Errorf("run: %w", runErr)
	}
	res, err := collect(ctx, s, *outDir, collectOpts)
	if err != nil {
		unfinished = interrupted(ctx) == nil
		return err
	}
	for _, f := range res.Files {
		fmt.Fprintf(c.stderr, "oma-sandbox: output %s (%d bytes)\n", textField(f.HostPath), f.Size)
	}
	if len(res.Files) == 0 && !res.Partial {
		fmt.Fprintln(c.stderr, "oma-sandbox: no output files")
	}
	if err := c.reportRefused(res); err != nil {
		unfinished = true
		return err
	}
	if status != exitOK {
		return exitCode(status)
	}
	return nil
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin quotes each argument for bash and joins them, so the command
// line bash runs has exactly these words.
func shellJoin(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		if shellSafe.MatchString(a) {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}
