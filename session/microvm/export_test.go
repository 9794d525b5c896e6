package microvm

import "time"

// SetChannelQuiet sets how long a channel may stay without calls before it
// is closed (what an idle timeout sets to half of itself).
func SetChannelQuiet(s *Session, d time.Duration) {
	s.ch.mu.Lock()
	s.ch.quietFor = d
	s.ch.mu.Unlock()
}

// ChannelQuiet is how long a channel may stay without calls.
func ChannelQuiet(s *Session) time.Duration {
	s.ch.mu.Lock()
	defer s.ch.mu.Unlock()
	return s.ch.quietFor
}

// SetHelloTimeout shortens the wait for a silent agent's hello.
func SetHelloTimeout(d time.Duration) (restore func()) {
	old := helloTimeout
	helloTimeout = d
	return func() { helloTimeout = old }
}
