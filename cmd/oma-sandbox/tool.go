package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// maxToolInput bounds a tool input read from stdin (a write tool's content).
const maxToolInput = 64 << 20

func runTool(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("tool", "NAME TOOL [JSON|-]\n       oma-sandbox tool --list [--json]", `Calls one agent tool in session NAME and prints the tool's result text on
stdout (followed by a newline when the text does not end in one). JSON is
the tool's input object, {} when omitted; - reads it from stdin. Attaching
by name runs nothing in the sandbox: the call costs what the tool costs.

When stdout is a terminal, bash shows the command's output there as it
arrives, every byte of it, then what the result adds after the output (the
truncation note naming the file with all of it, the exit or timeout note).
Otherwise stdout is the result text alone, the same bytes an agent gets:
at most the last 2000 lines or 50KB of the output, and the notes.

Exit status: 0 on success; 1 when the tool failed (its message on stderr;
for a bash command that exited non-zero or timed out, the result text is on
stdout); 2 when the command line or the tool input was refused before
anything ran (unknown tool, malformed JSON, an invalid field).`)
	list := fs.Bool("list", false, "print the tool definitions instead of calling a tool")
	asJSON := fs.Bool("json", false, "with --list: print the definitions (name, description, inputSchema) as JSON")
	noResume := fs.Bool("no-resume", false, "fail (exit 1, \"session is paused\") instead of resuming a paused session to run the tool")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if *list {
		if len(rest) > 0 {
			return &usageError{msg: fmt.Sprintf("tool --list takes no arguments, got %q", rest), usage: usage(fs)}
		}
		return c.listTools(*asJSON)
	}
	if *asJSON {
		return &usageError{msg: "--json goes with --list", usage: usage(fs)}
	}
	if len(rest) < 2 || len(rest) > 3 {
		msg := fmt.Sprintf("tool needs NAME TOOL [JSON|-], got %q", rest)
		if len(rest) > 3 {
			msg += " (the JSON input is one argument: quote it)"
		}
		return &usageError{msg: msg, usage: usage(fs)}
	}
	name, toolName := rest[0], rest[1]
	if !slices.Contains(tools.Names(), toolName) {
		return &usageError{msg: fmt.Sprintf("unknown tool %q (known: %s)", toolName, strings.Join(tools.Names(), ", "))}
	}
	input := json.RawMessage("{}")
	if len(rest) == 3 {
		input = json.RawMessage(rest[2])
		if rest[2] == "-" {
			if input, err = readInput(c.stdin); err != nil {
				return err
			}
		}
	}
	s, err := c.attachSession(ctx, name, omasandbox.Options{OneExecPerCall: true, NoAutoResume: *noResume})
	if err != nil {
		return err
	}
	opts := tools.Options{Logger: c.logger}
	if ls, ok := s.Sandbox().(*local.Session); ok {
		// This process makes one call: the next id kept in the session's
		// state lets the next process's bash call run in the bash the
		// agent starts ahead as this one ends.
		opts.BashChain = ls.BashChain()
	}
	tb := tools.New(s.Sandbox(), opts)
	out := newStreamed(c.stdout)
	var progress tools.Progress
	if toolName == "bash" && isTerminal(c.stdout) {
		progress = out.write
	}
	text, err := tb.Call(ctx, toolName, input, progress)
	var cmdErr *tools.CommandError
	var editErr *tools.EditError
	switch {
	case err == nil:
		return out.finish(text)
	case errors.As(err, &cmdErr):
		if err := out.finish(cmdErr.Text); err != nil {
			return err
		}
		return exitCode(exitFailure)
	case errors.As(err, &editErr):
		// The file was read: the edit ran and did not fit, a tool failure.
		return toolError(toolName, err)
	case errors.Is(err, tools.ErrInvalidInput):
		return &usageError{msg: err.Error()}
	case interrupted(ctx) != nil:
		return interrupted(ctx)
	}
	return toolError(toolName, err)
}

// toolError names the tool in err's message, unless the message (what
// the tool says to a model) begins with it already ("read a.txt: ...").
func toolError(tool string, err error) error {
	if msg := err.Error(); strings.HasPrefix(msg, tool+": ") || strings.HasPrefix(msg, tool+" ") {
		return err
	}
	return fmt.Errorf("%s: %w", tool, err)
}

func readInput(r io.Reader) (json.RawMessage, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxToolInput+1))
	if err != nil {
		return nil, fmt.Errorf("read tool input from stdin: %w", err)
	}
	if len(data) > maxToolInput {
		return nil, &usageError{msg: fmt.Sprintf("tool input on stdin exceeds %d bytes", maxToolInput)}
	}
	return data, nil
}

func (c *cli) listTools(asJSON bool) error {
	defs := tools.Definitions()
	if asJSON {
		return writeJSON(c.stdout, defs)
	}
	for _, d := range defs {
		fmt.Fprintf(c.stdout, "%-6s %s\n", d.Name, d.Description)
	}
	return nil
}

// streamed writes a bash command's output as it streams, then the part of
// the result text that follows the output.
type streamed struct {
	w    io.Writer
	mu   sync.Mutex
	tail *bashproto.Tail // the output's end, kept as the bash tool keeps it
	err  error
}

func newStreamed(w io.Writer) *streamed {
	return &streamed{w: w, tail: bashproto.NewTail(tools.BashMaxBytes)}
}

func (s *streamed) write(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		_, s.err = s.w.Write(p)
	}
	_, _ = s.tail.Write(p)
}

// finish writes text without the output already streamed, and a final
// newline if text lacks one.
func (s *streamed) finish(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("write result: %w", s.err)
	}
	rest := s.after(text)
	if !strings.HasSuffix(text, "\n") {
		rest += "\n"
	}
	_, err := io.WriteString(s.w, rest)
	return err
}

// sessionNotes are the notes of result text that carry the session's own
// reports (tools.NoteSessionLimit, tools.NoteNetwork).
func (s *streamed) sessionNotes(text string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var notes []string
	for _, n := range strings.Split(s.after(text), "\n\n") {
		if strings.HasPrefix(n, tools.NoteSessionLimit) || strings.HasPrefix(n, tools.NoteNetwork) {
			notes = append(notes, n)
		}
	}
	return notes
}

// after is what text adds to the output streamed: text starts with the
// output's end as its tail shows it (all of it when nothing was cut), so
// that is what is left off. s.mu must be held.
func (s *streamed) after(text string) string {
	return strings.TrimPrefix(text, string(s.tail.Show(tools.BashMaxLines).Text))
}
