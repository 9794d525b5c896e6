// Package tools is the agent tool layer: the definitions (JSON Schema) of
// read, write, edit, ls, glob, grep and bash, strict input validation, the
// result texts agent runtimes expect, and one dispatcher, Call, used by the
// CLI and the MCP server. Every tool is written once against session.Session,
// so each backend gets identical behaviour.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Errors callers test with errors.Is.
var (
	ErrUnknownTool  = errors.New("unknown tool")
	ErrInvalidInput = errors.New("invalid tool input")
	ErrPathEscape   = errors.New("path escapes the allowed root")
)

// InputError is a refused tool input; nothing ran in the sandbox. It matches
// ErrInvalidInput (and ErrPathEscape when a path left its root).
type InputError struct {
	Tool   string
	Msg    string
	escape bool
}

func (e *InputError) Error() string { return e.Msg }

// Is reports whether target is ErrInvalidInput, or ErrPathEscape for an escape.
func (e *InputError) Is(target error) bool {
	return target == ErrInvalidInput || (e.escape && target == ErrPathEscape)
}

func inputErrorf(tool, format string, args ...any) error {
	return &InputError{Tool: tool, Msg: fmt.Sprintf(format, args...)}
}

// Options configure a Toolbox.
type Options struct {
	// OperationTimeout bounds each guest command but bash's. 0 means the
	// session's own operation timeout when it has one (the msb and local
	// backends' Options.OperationTimeout), else 10 s.
	OperationTimeout time.Duration
	// BashTimeout is a bash call's timeout when it names none. 0 means
	// DefaultBashTimeout.
	BashTimeout time.Duration
	// Logger gets an audit record of every Call at Info level, and
	// warnings of failed cleanups; nil discards them.
	Logger *slog.Logger
	// TracerProvider gets a span per Call (see Toolbox.Call); nil means
	// otel.GetTracerProvider(), a no-op unless the program installed one.
	TracerProvider trace.TracerProvider
	// MeterProvider gets the calls' duration histogram (DurationMetric);
	// nil means otel.GetMeterProvider(), a no-op unless the program
	// installed one.
	MeterProvider metric.MeterProvider
	// Backend names the session's backend ("msb", "local") on the calls'
	// spans and metrics; "" leaves it out.
	Backend string
	// BashChain keeps the id a bash call names for its successor
	// (bashproto.Call.Next) beyond this toolbox: one made for a single call
	// in a process of its own (the one-shot CLI) then takes up the bash the
	// agent started ahead for it. nil keeps it in the toolbox.
	BashChain BashChain
}

// BashChain hands the id of the next bash call from one bash call to the
// next. Of two calls taking at once, at most one gets an id. A toolbox
// calls it under its own lock; a chain shared with other toolboxes or
// processes guards itself against them.
type BashChain interface {
	// Take returns the id the last call named for its successor, "" when
	// none waits, and whether a bash call came before.
	Take() (next string, before bool)
	// Leave keeps next for the call after; "" records only that a call
	// came, and leaves an id that waits where it is.
	Leave(next string)
}

// toolboxChain is the BashChain of a toolbox on its own, under its lock.
type toolboxChain struct {
	next string
	used bool
}

func (c *toolboxChain) Take() (string, bool) {
	next, used := c.next, c.used
	c.next, c.used = "", true
	return next, used
}

func (c *toolboxChain) Leave(next string) {
	if next != "" {
		c.next = next
	}
}

// operationTimed is a session that bounds its calls by a timeout of its own
// when they name none.
type operationTimed interface{ OperationTimeout() time.Duration }

// Toolbox runs the agent tools against one session. It is safe for
// concurrent use.
type Toolbox struct {
	sess        session.Session
	opTimeout   time.Duration
	bashTimeout time.Duration
	logger      *slog.Logger
	tracer      trace.Tracer
	duration    metric.Float64Histogram
	backend     string

	mu    sync.Mutex
	stats map[string]int
	locks map[string]*pathLock
	// bashChain holds the id the next bash call takes, given to the guest
	// by the one before (bashproto.Call.Next); bashCalls counts those in
	// flight.
	bashChain BashChain
	bashCalls int

	written lastWritten
}

// pathLock serializes the calls of this Toolbox that change one path, so
// that parallel edits of a file apply one after another instead of
// refusing each other.
type pathLock struct {
	mu    sync.Mutex
	users int
}

// lockPath takes the lock of the guest path abs and returns its release.
func (t *Toolbox) lockPath(abs string) (unlock func()) {
	t.mu.Lock()
	l := t.locks[abs]
	if l == nil {
		l = &pathLock{}
		t.locks[abs] = l
	}
	l.users++
	t.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		t.mu.Lock()
		if l.users--; l.users == 0 {
			delete(t.locks, abs)
		}
		t.mu.Unlock()
	}
}

// New returns a Toolbox for s.
func New(s session.Session, o Options) *Toolbox {
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = session.DefaultOperationTimeout
		if timed, ok := s.(operationTimed); ok && timed.OperationTimeout() > 0 {
			o.OperationTimeout = timed.OperationTimeout()
		}
	}
	if o.BashTimeout <= 0 {
		o.BashTimeout = DefaultBashTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.BashChain == nil {
		o.BashChain = &toolboxChain{}
	}
	return &Toolbox{sess: s, opTimeout: o.OperationTimeout, bashTimeout: o.BashTimeout, logger: o.Logger,
		tracer: o.TracerProvider.Tracer(tracerName), duration: durationHistogram(o.MeterProvider), backend: o.Backend,
		stats: map[string]int{}, locks: map[string]*pathLock{}, bashChain: o.BashChain}
}

// Session is the session the tools run in.
func (t *Toolbox) Session() session.Session { return t.sess }

// Stats reports how many calls each tool received that reached the sandbox
// (validation failures are not counted: they start nothing).
func (t *Toolbox) Stats() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.stats))
	for k, v := range t.stats {
		out[k] = v
	}
	return out
}

func (t *Toolbox) record(tool string) {
	t.mu.Lock()
	t.stats[tool]++
	t.mu.Unlock()
}

// Progress receives streamed output of a long-running tool (bash) as it
// arrives; nil discards it. The final result still carries the output.
type Progress func([]byte)

// Call validates input for the named tool and runs it. The returned text is
// the tool's result; an error's text is what the agent should see. Invalid
// input returns an *InputError before anything reaches the sandbox. Every
// call, refused ones too, gets an audit record at Info level in
// Options.Logger (see ResultClass and WithCallID) and a span, "execute_tool
// NAME", in Options.TracerProvider, the parent of any span the session
// starts for the call.
func (t *Toolbox) Call(ctx context.Context, name string, input json.RawMessage, progress Progress) (string, error) {
	began := time.Now()
	ctx, span := t.startSpan(ctx, name)
	text, err := t.call(ctx, name, input, progress)
	r := t.summarize(ctx, name, input, text, err)
	t.audit(ctx, r, began)
	endSpan(span, r)
	attrs := []attribute.KeyValue{attrToolName.String(toolName(name)), attrResult.String(r.result)}
	if t.backend != "" {
		attrs = append(attrs, attrBackend.String(t.backend))
	}
	t.duration.Record(context.WithoutCancel(ctx), time.Since(began).Seconds(), metric.WithAttributes(attrs...))
	return text, err
}

func (t *Toolbox) call(ctx context.Context, name string, input json.RawMessage, progress Progress) (string, error) {
	tool, ok := registry[name]
	if !ok {
		return "", fmt.Errorf("%w: %q (known: %v)", ErrUnknownTool, name, Names())
	}
	args, err := tool.schema.decode(name, input)
	if err != nil {
		return "", err
	}
	return tool.run(ctx, t, args, progress)
}

// Definition describes one tool for an agent runtime.
type Definition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Definitions returns every tool's definition, sorted by name.
func Definitions() []Definition {
	out := make([]Definition, 0, len(registry))
	for _, name := range Names() {
		tool := registry[name]
		out = append(out, Definition{Name: name, Description: tool.description, InputSchema: tool.schema.jsonSchema()})
	}
	return out
}

// Names lists the tool names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

type tool struct {
	description string
	schema      schema
	run         func(ctx context.Context, t *Toolbox, args args, progress Progress) (string, error)
}

// registry holds every tool; each is defined in its own file.
var registry = map[string]tool{
	"read":  readTool,
	"write": writeTool,
	"edit":  editTool,
	"ls":    lsTool,
	"glob":  globTool,
	"grep":  grepTool,
	"bash":  bashTool,
}
