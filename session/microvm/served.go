package microvm

import (
	"maps"
	"sync"
)

// Served counts how a session's calls reached the guest. A test holds a
// transport to it (a call that should travel on the channel and went by
// one exec is a silent fallback), and it is the figure an operator reads
// for fallbacks.
type Served struct {
	// Exec is the calls run by one msb exec each.
	Exec int
	// Channel is the calls run on the guest agent's channel; Builtins
	// counts, by name, those the agent ran as a builtin.
	Channel  int
	Builtins map[string]int
	// ScriptFallbacks is the channel calls that named a builtin the agent
	// did not offer, so it ran their script instead.
	ScriptFallbacks int
}

type servedCounter struct {
	mu sync.Mutex
	n  Served
}

func (c *servedCounter) exec() {
	c.mu.Lock()
	c.n.Exec++
	c.mu.Unlock()
}

// channel counts a channel call: builtin is the one the agent ran, "" for a
// script; fellBack says the call named a builtin the agent lacks.
func (c *servedCounter) channel(builtin string, fellBack bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n.Channel++
	if builtin != "" {
		if c.n.Builtins == nil {
			c.n.Builtins = map[string]int{}
		}
		c.n.Builtins[builtin]++
	}
	if fellBack {
		c.n.ScriptFallbacks++
	}
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
