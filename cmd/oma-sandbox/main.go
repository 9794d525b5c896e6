// Command oma-sandbox gives every agent session its own sandbox — a microVM
// through microsandbox's msb, or a local bubblewrap sandbox — and runs the
// agent tools inside it. docs/cli.md describes every command, flag, output
// and exit code; they are a contract that scripts rely on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/oma-sandbox/oma-sandbox/msb"
)

// Exit codes shared by every command (run passes its command's code on).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// cli is one invocation: its streams and the global flags.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	msbPath   string
	stateDir  string
	logLevel  string
	logFormat string
	logger    *slog.Logger
	telemetry *telemetry // the OTLP export $OTEL_* asks for
	// telemetryMu guards logger against the exporters' goroutines, and
	// telemetryEarly, what they reported before there was a logger.
	telemetryMu    sync.Mutex
	telemetryEarly []error
}

// command is one subcommand. run gets the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// commands lists the subcommands in the order the usage shows them.
var commands = []command{
	{"doctor", "report which backends are usable here, and why not", runDoctor},
	{"session", "create, list, remove, pause, resize and fork sessions", runSession},
	{"tool", "call one agent tool in a session", runTool},
	{"upload", "place a host file or tree in a session", runUpload},
	{"outputs", "collect a session's output files", runOutputs},
	{"run", "run a command in a fresh session and collect its outputs", runRun},
	{"reap", "remove stale sessions (for cron)", runReap},
	{"mcp", "serve a session's tools over MCP", runMCP},
	{"version", "print this build's version, commit and toolchain", runVersion},
}

// Main runs the CLI with args (without the program name) and returns the
// process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("oma-sandbox", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs)
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...) // the usual spelling
	}
	if err := fs.Parse(args); err != nil {
		return c.exit(c.parseError(fs, mainUsage, err))
	}
	args = fs.Args()
	if len(args) == 0 {
		return c.exit(&usageError{msg: "no command given", usage: mainUsage(fs)})
	}
	if args[0] == "help" {
		switch topic := args[1:]; {
		case len(topic) == 0, topic[0] == "help":
			fmt.Fprint(stdout, mainUsage(fs))
			return exitOK
		case len(topic) > 2 || len(topic) == 2 && topic[0] != "session":
			return c.exit(&usageError{msg: fmt.Sprintf("help takes a COMMAND (or session SUBCOMMAND), got %q", topic), usage: mainUsage(fs)})
		}
		args = append(args[1:], "-h") // help COMMAND is COMMAND -h
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			ctx, stop := signalContext(context.Background())
			defer stop()
			tel, err := startTelemetry(ctx, c)
			if err != nil {
				return c.exit(err)
			}
			defer tel.stop(c)
			c.telemetry = tel
			return c.exit(cmd.run(ctx, c, args[1:]))
		}
	}
	return c.exit(&usageError{msg: fmt.Sprintf("unknown command %q", args[0]), usage: mainUsage(fs)})
}

// globalFlags are accepted before the command and by every command.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.msbPath, "msb", c.msbPath, "the msb binary `PATH` (default $OMA_MSB, else msb on PATH)")
	fs.StringVar(&c.stateDir, "state-dir", c.stateDir, "`DIR` holding the local backend's sessions (default $XDG_STATE_HOME/oma-sandbox/local, else ~/.cache/oma-sandbox/local)")
	if c.logLevel == "" {
		c.logLevel = "warn"
	}
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log to stderr from this `LEVEL` on: debug, info (adds a record per tool call and session action), warn or error")
	if c.logFormat == "" {
		c.logFormat = "text"
	}
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "write log records as `FORMAT`: text (key=value) or json (one object a line)")
}

var globalFlagNames = map[string]bool{"msb": true, "state-dir": true, "log-level": true, "log-format": true}

func mainUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("Usage: oma-sandbox [global flags] COMMAND [flags] [args]\n\n")
	b.WriteString("Gives an agent session its own sandbox (msb microVM or local bubblewrap)\nand runs the agent tools in it.\n\nCommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	b.WriteString("\nGlobal flags (also accepted after the command):\n")
	writeFlags(&b, fs, func(name string) bool { return globalFlagNames[name] })
	b.WriteString("\nRun 'oma-sandbox help COMMAND' or 'oma-sandbox COMMAND -h' for a command's flags.\nExit codes: 0 success, 1 failure, 2 usage error; run exits with its command's code.\n")
	return b.String()
}

// setupLogger builds the stderr logger from --log-level and --log-format;
// it becomes slog's default so that library code logging there obeys them
// too.
func (c *cli) setupLogger() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return &usageError{msg: fmt.Sprintf("--log-level %q: want debug, info, warn or error", c.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch c.logFormat {
	case "text":
		h = slog.NewTextHandler(c.stderr, opts)
	case "json":
		h = slog.NewJSONHandler(c.stderr, opts)
	default:
		return &usageError{msg: fmt.Sprintf("--log-format %q: want text or json", c.logFormat)}
	}
	c.telemetryLoggerReady(slog.New(h))
	slog.SetDefault(c.logger)
	return nil
}

// client is the msb client for --msb (or $OMA_MSB, or msb on PATH).
func (c *cli) client() *msb.Client {
	return msb.NewClient(&msb.CLI{Path: c.msbPath, Logger: c.logger})
}

// msbBinary is the msb binary name or path the client will run.
func (c *cli) msbBinary() string {
	switch {
	case c.msbPath != "":
		return c.msbPath
	case os.Getenv("OMA_MSB") != "":
		return os.Getenv("OMA_MSB")
	}
	return "msb"
}

// usageError is a refused command line: exit 2, with the usage when the
// command line itself was malformed.
type usageError struct {
	msg   string
	usage string
}

func (e *usageError) Error() string { return e.msg }

// exitCode ends the process with code after the command printed what it had
// to say.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errHelp is returned after -h printed the usage on stdout.
var errHelp = errors.New("help requested")

func (c *cli) exit(err error) int {
	var usage *usageError
	var code exitCode
	var sig signalError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &usage):
		fmt.Fprintf(c.stderr, "oma-sandbox: %s\n", usage.msg)
		if usage.usage != "" {
			fmt.Fprintf(c.stderr, "\n%s", usage.usage)
		}
		return exitUsage
	case errors.As(err, &sig):
		fmt.Fprintf(c.stderr, "oma-sandbox: interrupted by %v\n", sig.sig)
		return 128 + int(sig.sig)
	}
	fmt.Fprintf(c.stderr, "oma-sandbox: %v\n", err)
	return exitFailure
}

// flagSet makes a command's flag set with the global flags. synopsis is
// what follows the command name in the usage line.
func (c *cli) flagSet(name, synopsis, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs)
	fs.Usage = func() {
		var b strings.Builder
		fmt.Fprintf(&b, "Usage: oma-sandbox %s %s\n\n%s\n", name, synopsis, help)
		var own strings.Builder
		writeFlags(&own, fs, func(n string) bool { return !globalFlagNames[n] })
		if own.Len() > 0 {
			b.WriteString("\nFlags:\n")
			b.WriteString(own.String())
		}
		b.WriteString("\nGlobal flags: --msb PATH, --state-dir DIR, --log-level LEVEL, --log-format FORMAT (see oma-sandbox -h).\n")
		fmt.Fprint(fs.Output(), b.String())
	}
	return fs
}

// usage renders fs's usage text.
func usage(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.Usage()
	fs.SetOutput(io.Discard)
	return b.String()
}

// parse parses a command's flags, which may come before, between and after
// its positional arguments (until "--"), then sets up logging. -h prints the
// usage on stdout.
func (c *cli) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, c.parseError(fs, usage, err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return positional, c.setupLogger()
}

// parseLeading parses flags up to the first positional argument or "--",
// for commands whose arguments are another command line.
func (c *cli) parseLeading(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, c.parseError(fs, usage, err)
	}
	return fs.Args(), c.setupLogger()
}

// parseError handles a flag parsing error; render produces the usage text.
func (c *cli) parseError(fs *flag.FlagSet, render func(*flag.FlagSet) string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stdout, render(fs))
		return errHelp
	}
	return &usageError{msg: err.Error(), usage: render(fs)}
}

// writeFlags lists the flags that keep selects, sorted, in --name form.
func writeFlags(w io.Writer, fs *flag.FlagSet, keep func(string) bool) {
	var all []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if keep(f.Name) {
			all = append(all, f)
		}
	})
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for _, f := range all {
		kind, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n      %s", line, text)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	}
}

// signalError is the cause of a context that SIGINT or SIGTERM cancelled.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// signalContext is cancelled, with a signalError as its cause, on the first
// SIGINT or SIGTERM. Later signals are still caught until stop, so cleanup
// after the first one is not cut short.
func signalContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(signalError{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interrupted returns the signal error when ctx was cancelled by one.
func interrupted(ctx context.Context) error {
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) {
		return sig
	}
	return nil
}

// version is the module version this binary was built from.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
