//go:build linux

package local

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestStdioFrames(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := s.OpenStdio(ctx, session.Command{Script: `while IFS= read -r l; do [ "$l" = quit ] && exit 0; echo "got:$l"; echo noise >&2; done`}, StdioOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, f := range []string{"a", "b c", ""} {
		if err := st.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Receive(ctx); err != nil || got != "got:"+f {
			t.Fatalf("frame %q: %q %v", f, got, err)
		}
	}
	for _, bad := range []string{"x\ny", "x\r", "\n"} {
		if err := st.Send(ctx, bad); !errors.Is(err, session.ErrInvalid) {
			t.Fatalf("frame %q: %v", bad, err)
		}
	}
	if err := st.Send(ctx, "quit"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after exit: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	st2, err := s.OpenStdio(ctx, session.Command{Script: `sleep 100`}, StdioOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Receive(short); !errors.Is(err, session.ErrHostTimeout) {
		t.Fatalf("receive deadline: %v", err)
	}
	start := time.Now()
	if err := st2.Close(); err != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("close: %v after %s", err, time.Since(start))
	}
}

func TestStdioLimits(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	flood, err := s.OpenStdio(ctx, session.Command{Script: `yes line`}, StdioOptions{MaxOutput: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		f, err := flood.Receive(ctx)
		if err != nil {
			if !errors.Is(err, session.ErrOutputOverflow) || n > 64<<10/5 {
				t.Fatalf("flood ended with %v after %d frames", err, n)
			}
			break
		}
		if f != "line" {
			t.Fatalf("frame %q", f)
		}
		n++
	}
	flood.Close()
	noisy, err := s.OpenStdio(ctx, session.Command{Script: `yes noise >&2`}, StdioOptions{MaxOutput: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noisy.Receive(ctx); !errors.Is(err, session.ErrOutputOverflow) {
		t.Fatalf("stderr flood: %v", err)
	}
	noisy.Close()
	slow, err := s.OpenStdio(ctx, session.Command{Script: `read -r l; sleep 100`}, StdioOptions{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Receive(ctx); !errors.Is(err, session.ErrGuestTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if err := slow.Send(ctx, "late"); !errors.Is(err, session.ErrGuestTimeout) {
		t.Fatalf("send after timeout: %v", err)
	}
	if err := slow.Close(); !errors.Is(err, session.ErrGuestTimeout) {
		t.Fatalf("close reports the end: %v", err)
	}
}

func TestSessionCloseEndsStdio(t *testing.T) {
	ctx := context.Background()
	s, err := Create(ctx, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.OpenStdio(ctx, session.Command{Script: `sleep 100`}, StdioOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(ctx); !errors.Is(err, session.ErrClosed) {
		t.Fatalf("receive after session close: %v", err)
	}
	st.Close()
}

// A conversation is a call of the session's: on a paused session it
// resumes it first, or, when auto-resume is off, fails with ErrPaused and
// runs nothing; a Pause waits for the conversation, as for a call in
// flight, rather than leave its command running in a paused session.
func TestStdioHonoursPause(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	s.SetAutoResume(false)
	if st, err := s.OpenStdio(ctx, session.Command{Script: `echo ran`}, StdioOptions{}); !errors.Is(err, session.ErrPaused) {
		if err == nil {
			f, rerr := st.Receive(ctx)
			t.Errorf("OpenStdio on a paused session without auto-resume ran its command: %q %v", f, rerr)
			st.Close()
		} else {
			t.Errorf("OpenStdio on a paused session without auto-resume: %v, want ErrPaused", err)
		}
	}
	s.SetAutoResume(true)
	st, err := s.OpenStdio(ctx, session.Command{Script: `echo ran; sleep 100`}, StdioOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := st.Receive(ctx); f != "ran" || err != nil {
		t.Errorf("Receive = %q, %v", f, err)
	}
	if s.paused() {
		t.Error("OpenStdio did not resume the session")
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := s.Pause(short); err == nil || s.paused() {
		t.Errorf("Pause during a conversation = %v (paused: %v), want it to wait for the conversation", err, s.paused())
	}
	st.Close()
	if err := s.Pause(ctx); err != nil {
		t.Errorf("Pause after the conversation: %v", err)
	}
}

// A conversation, as a call, starts no sandbox over a box another
// process is removing: it fails with ErrGone.
func TestStdioStartsNothingUnderARemoval(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	markRemoving(s.dirs.Root)
	st, err := s.OpenStdio(ctx, session.Command{Script: `echo ran; sleep 100`}, StdioOptions{})
	if err == nil {
		f, _ := st.Receive(ctx)
		st.Close()
		t.Fatalf("OpenStdio under a removal started its command (it said %q)", f)
	}
	if !errors.Is(err, session.ErrGone) {
		t.Errorf("OpenStdio under a removal = %v, want ErrGone", err)
	}
}
