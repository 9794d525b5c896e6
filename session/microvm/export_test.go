package microvm

import "time"

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

// WithoutBundledAgent makes Create find no bundled agent, and this program
// able to serve as its own in a guest or not.
func WithoutBundledAgent(selfServes bool) (restore func()) {
	oldBundled, oldSelf := bundled, selfGuest
	bundled = func(string) ([]byte, bool) { return nil, false }
	selfGuest = func(string) (bool, string) {
		if selfServes {
			return true, ""
		}
		return false, "test: it cannot"
	}
	return func() { bundled, selfGuest = oldBundled, oldSelf }
}

// WithBundledAgent makes bin the agent this build embeds.
func WithBundledAgent(bin []byte) (restore func()) {
	old := bundled
	bundled = func(string) ([]byte, bool) { return bin, true }
	return func() { bundled = old }
}

// SetOperationTimeout changes the timeout of s's guest commands.
func SetOperationTimeout(s *Session, d time.Duration) { s.opTimeout = d }
