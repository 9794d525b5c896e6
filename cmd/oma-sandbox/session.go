package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

const sessionUsage = `Usage: oma-sandbox session create [flags]
       oma-sandbox session list [--backend all|msb|local] [--json]
       oma-sandbox session rm NAME...
       oma-sandbox session pause NAME
       oma-sandbox session resume NAME
       oma-sandbox session stats NAME [--json]
       oma-sandbox session resize NAME [--cpus N] [--memory SIZE] [--restart | --next-start]
       oma-sandbox session fork NAME [--session-id ID] [--json]

Run 'oma-sandbox session SUBCOMMAND -h' for its flags.
`

// helpArgs ask a command for its usage.
var helpArgs = []string{"-h", "-help", "--help", "help"}

func runSession(ctx context.Context, c *cli, args []string) error {
	if len(args) > 0 && strings.HasPrefix(args[0], "-") && !slices.Contains(helpArgs, args[0]) {
		// Global flags between the command and its subcommand.
		fs := flag.NewFlagSet("oma-sandbox session", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.globalFlags(fs)
		if err := fs.Parse(args); err != nil {
			return &usageError{msg: "session: " + err.Error(), usage: sessionUsage}
		}
		args = fs.Args()
	}
	if len(args) == 0 {
		return &usageError{msg: "session: no subcommand given", usage: sessionUsage}
	}
	if slices.Contains(helpArgs, args[0]) {
		fmt.Fprint(c.stdout, sessionUsage)
		return errHelp
	}
	switch args[0] {
	case "create":
		return runSessionCreate(ctx, c, args[1:])
	case "list", "ls":
		return runSessionList(ctx, c, args[1:])
	case "rm", "remove":
		return runSessionRm(ctx, c, args[1:])
	case "pause":
		return runSessionPause(ctx, c, args[1:])
	case "resume":
		return runSessionResume(ctx, c, args[1:])
	case "stats":
		return runSessionStats(ctx, c, args[1:])
	case "resize":
		return runSessionResize(ctx, c, args[1:])
	case "fork":
		return runSessionFork(ctx, c, args[1:])
	}
	return &usageError{msg: fmt.Sprintf("session: unknown subcommand %q", args[0]), usage: sessionUsage}
}

// sessionInfo is what session create prints as JSON.
type sessionInfo struct {
	Name    string       `json:"name"`
	Backend string       `json:"backend"`
	Sandbox string       `json:"sandbox"`
	Volume  string       `json:"volume,omitempty"`
	Paths   sessionPaths `json:"paths"`
}

type sessionPaths struct {
	Workspace string `json:"workspace"`
	Uploads   string `json:"uploads"`
	Outputs   string `json:"outputs"`
	Skills    string `json:"skills"`
}

func describe(s session.Session) sessionInfo {
	p := s.Paths()
	info := sessionInfo{Name: s.Name(), Backend: backendLocal, Sandbox: s.Name(),
		Paths: sessionPaths{Workspace: p.Workspace, Uploads: p.Uploads, Outputs: p.Outputs, Skills: p.Skills}}
	if ms, ok := s.(*microvm.Session); ok {
		info.Backend, info.Volume = backendMsb, ms.Names().Volume
	}
	return info
}

func runSessionCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session create", "[flags]", `Creates a session and prints its name; it lives until 'session rm NAME'
(or the reaper). With --json it prints name, backend, sandbox, volume (msb)
and the guest paths.`)
	var f createFlags
	f.register(fs)
	asJSON := fs.Bool("json", false, "print the session as JSON")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &usageError{msg: fmt.Sprintf("session create takes no arguments, got %q", rest), usage: usage(fs)}
	}
	p, err := c.resolve(ctx, &f, setFlags(fs))
	if err != nil {
		return err
	}
	s, err := c.create(ctx, p)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.stdout, describe(s.Sandbox()))
	}
	fmt.Fprintln(c.stdout, s.Name())
	return nil
}

// listed is one session of session list.
type listed struct {
	Name        string    `json:"name"`
	Backend     string    `json:"backend"`
	Status      string    `json:"status,omitempty"` // msb's, or the local session's state
	CreatedAt   time.Time `json:"created_at"`
	WorkspaceID string    `json:"workspace_id,omitempty"` // local only: msb's listing has no labels
	SessionID   string    `json:"session_id,omitempty"`
}

func runSessionList(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session list", "[--backend all|msb|local] [--json]", `Lists the sessions of both backends: msb sandboxes that carry the owner
labels and a session name, and the local sessions of the state directory.
With --backend all (the default) msb is skipped when its binary is not
found. Text output is one line per session: NAME BACKEND CREATED STATUS.
STATUS is msb's for an msb session; for a local one paused, running (its
sandbox runs) or idle (nothing of it runs until its next call).`)
	backend := fs.String("backend", backendAll, "`backend` to list: all, msb or local")
	asJSON := fs.Bool("json", false, "print a JSON array")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &usageError{msg: fmt.Sprintf("session list takes no arguments, got %q", rest), usage: usage(fs)}
	}
	if !slices.Contains([]string{backendAll, backendMsb, backendLocal}, *backend) {
		return &usageError{msg: fmt.Sprintf("--backend %q: want all, msb or local", *backend)}
	}
	out := []listed{}
	if *backend == backendMsb || *backend == backendAll && c.msbInstalled() {
		sbs, err := c.client().List(ctx, msb.ListOptions{Labels: session.OwnerLabels()})
		if err != nil {
			return fmt.Errorf("list msb sessions: %w", err)
		}
		for _, sb := range sbs {
			if _, ok := session.SandboxStem(session.DefaultPrefix, sb.Name); ok {
				out = append(out, listed{Name: sb.Name, Backend: backendMsb, Status: sb.Status, CreatedAt: sb.CreatedAt})
			}
		}
	}
	if *backend != backendMsb {
		infos, err := local.List(c.stateDir)
		if err != nil {
			return fmt.Errorf("list local sessions: %w", err)
		}
		for _, in := range infos {
			out = append(out, listed{Name: in.Name, Backend: backendLocal, Status: in.State, CreatedAt: in.CreatedAt,
				WorkspaceID: in.WorkspaceID, SessionID: in.SessionID})
		}
	}
	if *asJSON {
		return writeJSON(c.stdout, out)
	}
	for _, l := range out {
		status := l.Status
		if status == "" {
			status = "-"
		}
		fmt.Fprintf(c.stdout, "%s\t%s\t%s\t%s\n", l.Name, l.Backend, l.CreatedAt.UTC().Format(time.RFC3339), status)
	}
	return nil
}

// msbInstalled reports whether the msb binary can be found; where it
// cannot, no msb session can exist.
func (c *cli) msbInstalled() bool {
	_, err := exec.LookPath(c.msbBinary())
	return err == nil
}

func runSessionRm(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("session rm", "NAME...", `Removes sessions by name: the sandbox and its volume (msb), or the state
directory and cgroups (local). The backend follows from the name. Every name
is tried; the exit status is 1 when any of them failed, and each failure
names its session on stderr. Removed names are printed on stdout.`)
	names, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return &usageError{msg: "session rm needs at least one NAME", usage: usage(fs)}
	}
	// One listing tells which msb names exist, so a name that does not is
	// reported rather than silently "removed".
	var msbListed map[string]bool
	if slices.ContainsFunc(names, func(n string) bool { return backendOf(n) == backendMsb }) {
		sbs, err := c.client().List(ctx, msb.ListOptions{Labels: session.OwnerLabels()})
		if err != nil {
			return fmt.Errorf("list msb sessions: %w", err)
		}
		msbListed = map[string]bool{}
		for _, sb := range sbs {
			msbListed[sb.Name] = true
		}
	}
	failed := false
	for _, name := range names {
		err := errNoSession
		if backendOf(name) != backendMsb || msbListed[name] {
			err = c.remove(ctx, name)
		}
		if err != nil {
			if sig := interrupted(ctx); sig != nil {
				return sig
			}
			failed = true
			fmt.Fprintf(c.stderr, "oma-sandbox: session rm %s: %v\n", name, err)
			continue
		}
		fmt.Fprintln(c.stdout, name)
	}
	if failed {
		return exitCode(exitFailure)
	}
	return nil
}

var errNoSession = errors.New("no such session")

// remove closes one session by name. A local session not found says
// which state directory was searched.
func (c *cli) remove(ctx context.Context, name string) error {
	s, err := c.open(ctx, name)
	if errors.Is(err, session.ErrNotFound) {
		if backendOf(name) != backendLocal {
			return errNoSession
		}
		dir, derr := c.stateDir, error(nil)
		if dir == "" {
			dir, derr = local.DefaultStateDir()
		}
		if derr != nil {
			return errNoSession
		}
		return fmt.Errorf("%w in %s (one made with another --state-dir or XDG_STATE_HOME is not seen here)", errNoSession, dir)
	}
	if err != nil {
		return err
	}
	return closeSession(ctx, s)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
