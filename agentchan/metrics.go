package agentchan

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The guest agent's metrics, by backend (oma.backend): what became of a
// session's channel, and how its calls reached the guest.
const (
	// ChannelEventsMetric counts channel events by oma.event (the
	// Event constants).
	ChannelEventsMetric = "oma_sandbox.agent.channel.events"
	// CallsMetric counts the calls that reached the guest, by oma.route
	// ("channel": the agent's channel; "own": a process of their own, an
	// msb exec or a local sandbox per call) and oma.ran ("builtin": the
	// agent's builtin, as every tool call is; "script": a command of the
	// caller's own, such as session exec's).
	CallsMetric = "oma_sandbox.agent.calls"
)

// Event is what happened to a session's channel.
type Event string

const (
	// Opened: the agent answered its hello; calls go over the channel.
	Opened Event = "opened"
	// OpenFailed: the agent did not start or did not answer.
	OpenFailed Event = "open_failed"
	// Died: the channel ended without the host closing it (the agent,
	// its sandbox or its msb exec ended).
	Died Event = "died"
	// FellBack: the session gave its channel up after failures; its
	// calls take a process of their own from then on.
	FellBack Event = "fell_back"
	// Replaced: the agent, older than this program, was replaced with
	// this program's (msb: a sandbox made by an older oma-sandbox; local:
	// a resident sandbox an older program started, once idle).
	Replaced Event = "replaced"
	// ReplaceFailed: such an agent could not be replaced; the builtins it
	// lacks fail.
	ReplaceFailed Event = "replace_failed"
)

const scope = "github.com/oma-sandbox/oma-sandbox/agentchan"

var (
	attrBackend = attribute.Key("oma.backend")
	attrEvent   = attribute.Key("oma.event")
	attrRoute   = attribute.Key("oma.route")
	attrRan     = attribute.Key("oma.ran")

	// The attributes of a call's span events (see Conn.Run).
	attrCallID      = attribute.Key("oma.agent.call_id")
	attrBuiltin     = attribute.Key("oma.agent.builtin")
	attrOutcome     = attribute.Key("oma.agent.outcome")
	attrOutputBytes = attribute.Key("oma.agent.output_bytes")
	attrExitCode    = attribute.Key("oma.agent.exit_code")
)

// Meters records one session's channel events and calls. The zero value
// (and a nil *Meters) records nothing.
type Meters struct {
	events, calls metric.Int64Counter
	backend       attribute.KeyValue
}

// NewMeters returns the instruments of mp for a session of backend.
func NewMeters(mp metric.MeterProvider, backend string) *Meters {
	m := mp.Meter(scope)
	events, err := m.Int64Counter(ChannelEventsMetric, metric.WithUnit("{event}"),
		metric.WithDescription("Guest agent channel events, by backend and event"))
	if err != nil {
		events = noop.Int64Counter{}
	}
	calls, err := m.Int64Counter(CallsMetric, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that reached the guest, by backend, route and what ran them"))
	if err != nil {
		calls = noop.Int64Counter{}
	}
	return &Meters{events: events, calls: calls, backend: attrBackend.String(backend)}
}

// Event counts e.
func (m *Meters) Event(e Event) {
	if m == nil || m.events == nil {
		return
	}
	m.events.Add(context.Background(), 1, metric.WithAttributes(m.backend, attrEvent.String(string(e))))
}

// Call counts a call: onChannel says it ran on the channel, builtin names
// the agent's builtin that ran it ("" for a script).
func (m *Meters) Call(onChannel bool, builtin string) {
	if m == nil || m.calls == nil {
		return
	}
	route, ran := "own", "script"
	if onChannel {
		route = "channel"
	}
	if builtin != "" {
		ran = "builtin"
	}
	m.calls.Add(context.Background(), 1, metric.WithAttributes(m.backend, attrRoute.String(route), attrRan.String(ran)))
}
