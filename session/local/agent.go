package local

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/guestagent/selfagent"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// agentGuestPath is where a sandbox sees the guest agent, as on msb. The
// package links selfagent: a build without the bundled agent serves as
// its own, from an execute-only copy (agent.hostPath).
const agentGuestPath = selfagent.GuestPath

// agent is the guest agent a session's calls run their builtins with: a
// private cached copy, bound read-only into each sandbox.
type agent struct {
	file string // Options.AgentFile; "" means the bundled agent

	once sync.Once
	path string // host path of the cached copy; "" for none
	err  error

	mu   sync.Mutex // guards path once it is this program's copy
	self bool       // path is this program's own copy (bundle.SelfCached)
}

// bundled is the agent this build embeds (a variable for the tests of a
// build without one).
var bundled = bundle.Binary

// hostPath finds (once) the agent's host path. Without an agent file or a
// bundled agent, this program serves as its own (selfagent).
func (a *agent) hostPath() (string, error) {
	a.once.Do(func() {
		var bin []byte
		if a.file != "" {
			if bin, a.err = os.ReadFile(a.file); a.err != nil {
				a.err = fmt.Errorf("local sandbox: agent file: %w: %w", a.err, session.ErrInvalid)
				return
			}
		} else {
			bin, _ = bundled(runtime.GOARCH)
		}
		dir, err := bundle.CacheDir()
		switch {
		case err != nil:
		case bin == nil:
			a.path, err = bundle.SelfCached(dir, 0o111)
			a.self = true
		default:
			a.path, err = bundle.Cached(dir, bin)
		}
		if err != nil {
			a.err = fmt.Errorf("local sandbox: agent cache: %w: %w", err, session.ErrCannotStart)
		}
	})
	if !a.self || a.err != nil {
		return a.path, a.err
	}
	// Another program's SelfCached prunes copies unasked for a while: a
	// long-lived session places its own again.
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := os.Lstat(a.path); errors.Is(err, fs.ErrNotExist) {
		dir, err := bundle.CacheDir()
		if err == nil {
			a.path, err = bundle.SelfCached(dir, 0o111)
		}
		if err != nil {
			return "", fmt.Errorf("local sandbox: agent cache: %w: %w", err, session.ErrCannotStart)
		}
	}
	return a.path, nil
}

// Served counts how a session's calls ran.
type Served struct {
	// Builtins counts, by name, the calls the guest agent ran.
	Builtins map[string]int
	// Scripts is the calls bash ran: commands of the caller's own, such
	// as session exec's.
	Scripts int
	// Resident is the calls (of those above) the session's resident
	// sandbox ran; the others ran sandboxes of their own.
	Resident int
}

type servedCounter struct {
	mu     sync.Mutex
	n      Served
	meters atomic.Pointer[meters] // nil until Measure
}

// meters are the instruments Measure gives a session.
type meters struct {
	agent    *agentchan.Meters
	refusals func(*egress.RefusedError)
}

// Measure records this session's calls, its resident sandbox's events
// (agentchan.CallsMetric, agentchan.ChannelEventsMetric) and its egress
// refusals (egress.RefusalsMetric) on mp's instruments.
func (s *Session) Measure(mp metric.MeterProvider) {
	s.served.meters.Store(&meters{agent: agentchan.NewMeters(mp, "local"), refusals: egress.CountRefusals(mp, "local")})
}

// event counts what happened to the session's resident sandbox.
func (s *Session) event(e agentchan.Event) {
	if m := s.served.meters.Load(); m != nil {
		m.agent.Event(e)
	}
}

// countRefusal counts an egress refusal of one of the session's calls.
func (s *Session) countRefusal(e *egress.RefusedError) {
	if m := s.served.meters.Load(); m != nil && m.refusals != nil {
		m.refusals(e)
	}
}

func (c *servedCounter) count(builtin string, resident bool) {
	if m := c.meters.Load(); m != nil {
		m.agent.Call(resident, builtin)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if resident {
		c.n.Resident++
	}
	if builtin == "" {
		c.n.Scripts++
		return
	}
	if c.n.Builtins == nil {
		c.n.Builtins = map[string]int{}
	}
	c.n.Builtins[builtin]++
}

// Served returns how this session's calls have run so far (calls refused
// before a sandbox started are not counted).
func (s *Session) Served() Served {
	s.served.mu.Lock()
	defer s.served.mu.Unlock()
	n := s.served.n
	n.Builtins = maps.Clone(n.Builtins)
	return n
}
