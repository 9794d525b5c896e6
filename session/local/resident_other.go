//go:build !linux

package local

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Only Linux starts resident sandboxes (no platform here is a
// residentStarter), so these are never reached with one running.

func (s *Session) startResident(context.Context, call) (*resident, error) {
	return nil, errors.New("no resident sandbox on " + runtime.GOOS)
}

func (s *Session) endAnyResident() {}

// lockResize needs no lock here: no limits can be enforced, so no resize
// rewrites them.
func lockResize(context.Context, string) (func(), error) { return func() {}, nil }

// holdFreeze needs no lock here: no sandbox is frozen.
func holdFreeze(context.Context, string) (func(), error) { return func() {}, nil }

func (s *Session) endIfIdle(context.Context, *resident) bool { return false }

func logTail(string) string { return "" }

func readResident(string) residentProcs { return residentProcs{} }

func runningResident(string) (residentProcs, bool) { return residentProcs{}, false }

func residentStats(string, residentProcs, Limits, *session.Stats) {}

func freezeResident(context.Context, string, bool, time.Duration, func() bool) (bool, error) {
	return false, nil
}
