package egress

import "sync"

// MaxRefusals bounds the refusals one command's Refusals keeps: a command
// that tries endless destinations cannot grow what the host holds.
const MaxRefusals = 20

// Refusals collects a Proxy's refusals for one command (its Add is a
// Proxy.Refused), the first MaxRefusals of them and a line saying when
// there were more. It is safe for concurrent use.
type Refusals struct {
	mu    sync.Mutex
	notes []string
}

// Add records a refusal of the proxy.
func (r *Refusals) Add(e *RefusedError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(r.notes) < MaxRefusals:
		r.notes = append(r.notes, "egress refused "+e.Dest+": "+e.Reason)
	case len(r.notes) == MaxRefusals:
		r.notes = append(r.notes, "egress refused more destinations")
	}
}

// Notes returns the recorded lines, oldest first.
func (r *Refusals) Notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notes...)
}
