package bench

import (
	"context"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// realVMSession creates a session on the real VM (the bundled agent's
// channel, or one exec per call), closed when b ends.
func realVMSession(b *testing.B, client *msb.Client, channel bool) *microvm.Session {
	b.Helper()
	o := sessionOptions(client, "")
	o.Image, o.NoChannel, o.OperationTimeout = microvm.DefaultImage, !channel, realvm.OperationTimeout
	s, err := microvm.Create(context.Background(), o)
	check(b, err)
	b.Cleanup(func() { check(b, s.Close(context.Background())) })
	return s
}

// BenchmarkRealVMToolCall is BenchmarkToolCall on the real msb, booting
// microVMs with the guest image (where none boots it skips with msb
// doctor's reason; scripts/real-vm.sh runs it in an outer guest): each
// tool over the guest agent's channel (ours, the agent bundled into this
// binary), over one msb exec per call (exec), and one raw `msb exec NAME
// -- true` (floor), side by side.
func BenchmarkRealVMToolCall(b *testing.B) {
	vm := realvm.Booting(b, microvm.DefaultImage)
	client := msb.NewClient(vm.CLI())
	chanSess := realVMSession(b, client, true)
	execSess := realVMSession(b, client, false)
	chanTB, _ := toolFixture(b, client, chanSess)
	execTB, _ := toolFixture(b, client, execSess)
	channelAndExecRows(b, client, chanSess, execSess, chanTB, execTB, nil)
	served := chanSess.Served()
	if served.Exec > 0 {
		b.Fatalf("a channel call fell back: %+v", served)
	}
}

// BenchmarkRealVMSession is a session's create and close on the real msb:
// ours (with the guest agent; its channel opens on the first call, which
// is timed too) beside one without the agent.
func BenchmarkRealVMSession(b *testing.B) {
	vm := realvm.Booting(b, microvm.DefaultImage)
	client := msb.NewClient(vm.CLI())
	lifetime := func(channel bool) func() {
		return func() {
			o := sessionOptions(client, "")
			o.Image, o.NoChannel, o.OperationTimeout = microvm.DefaultImage, !channel, realvm.OperationTimeout
			s, err := microvm.Create(context.Background(), o)
			check(b, err)
			mustShell(b, s, "true")
			check(b, s.Close(context.Background()))
		}
	}
	s := newSideBySide(b)
	for b.Loop() {
		s.round(variant{"ours", lifetime(true)}, variant{"exec", lifetime(false)})
	}
	s.report()
}
