package microvm

import (
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
)

// Served counts how a session's calls reached the guest. A test holds a
// transport to it (a call that should travel on the channel and went by
// one exec is a silent fallback), and it is the figure an operator reads
// for fallbacks.
type Served struct {
	// Exec is the calls run by one msb exec each; Channel those run on the
	// guest agent's channel. Builtins counts, by name, the calls of either
	// the agent ran as a builtin.
	Exec     int
	Channel  int
	Builtins map[string]int
}

type servedCounter struct {
	mu     sync.Mutex
	n      Served
	meters atomic.Pointer[agentchan.Meters] // nil until Measure
}

// Measure records this session's channel events and calls on mp's
// instruments (agentchan.ChannelEventsMetric, agentchan.CallsMetric).
func (s *Session) Measure(mp metric.MeterProvider) {
	s.served.meters.Store(agentchan.NewMeters(mp, "msb"))
}

// event counts what happened to the session's channel.
func (s *Session) event(e agentchan.Event) { s.served.meters.Load().Event(e) }

// exec counts a call by one msb exec: builtin is the one the agent ran, ""
// for a script.
func (c *servedCounter) exec(builtin string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n.Exec++
	c.meters.Load().Call(false, builtin)
	c.builtin(builtin)
}

func (c *servedCounter) builtin(name string) {
	if name == "" {
		return
	}
	if c.n.Builtins == nil {
		c.n.Builtins = map[string]int{}
	}
	c.n.Builtins[name]++
}

// channel counts a channel call: builtin is the one the agent ran, "" for a
// script.
func (c *servedCounter) channel(builtin string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n.Channel++
	c.meters.Load().Call(true, builtin)
	c.builtin(builtin)
}

// Served returns how this session's calls have reached the guest so far
// (calls refused before they reached msb are not counted).
func (s *Session) Served() Served {
	s.served.mu.Lock()
	defer s.served.mu.Unlock()
	n := s.served.n
	n.Builtins = maps.Clone(n.Builtins)
	return n
}
