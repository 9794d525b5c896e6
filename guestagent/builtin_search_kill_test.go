//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/grep"
)

// startTagged starts, in a session of its own tagged env=token, a sh that
// leaves a tagged sleep and an untagged one in its process group and then
// sleeps itself; it returns the sh and a channel closed when it is reaped.
func startTagged(t *testing.T, env, token string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & env -i /bin/sleep 60 & exec sleep 60")
	cmd.Env = append(os.Environ(), env+"="+token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	// Wait for the group's three processes.
	for deadline := time.Now().Add(5 * time.Second); len(groupOf(cmd.Process.Pid)) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the tagged group never held three processes: %v", groupOf(cmd.Process.Pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, done
}

// groupOf lists the live processes of process group pgrp.
func groupOf(pgrp int) []int {
	var pids []int
	for pid, st := range scanProcs() {
		if st.pgrp == pgrp {
			pids = append(pids, pid)
		}
	}
	return pids
}

// The builtin ends every process tagged with the token and every process
// of their groups, an untagged one too, and nothing tagged with another
// token.
func TestSearchKill(t *testing.T) {
	for _, env := range []string{glob.OwnerEnv, grep.OwnerEnv} {
		t.Run(env, func(t *testing.T) {
			token, other := "oma-test-kill", "oma-test-spare"
			target, ended := startTagged(t, env, token)
			bystander, _ := startTagged(t, env, other)
			var stdout, stderr bytes.Buffer
			code, err := RunBuiltin(agentwire.BuiltinSearchKill, glob.CleanupArgs(env, token), nil, &stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			if code != 0 || stdout.Len() > 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the tagged sh still runs")
			}
			// Killed is not yet gone: the group's last may take a moment.
			for deadline := time.Now().Add(5 * time.Second); len(groupOf(target.Process.Pid)) > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("left running in the tagged group: %v", groupOf(target.Process.Pid))
				}
			}
			if n := len(groupOf(bystander.Process.Pid)); n != 3 {
				t.Errorf("%d of 3 processes tagged with another token are left", n)
			}
		})
	}
}

// With nothing tagged there is nothing to do: success at once.
func TestSearchKillNothingToDo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code, err := RunBuiltin(agentwire.BuiltinSearchKill, grep.CleanupArgs("oma-test-none"), nil, &stdout, &stderr)
	if err != nil || code != 0 || stdout.Len()+stderr.Len() > 0 || time.Since(began) > time.Second {
		t.Fatalf("exit %d (%v), stdout %q, stderr %q, after %v", code, err, stdout.String(), stderr.String(), time.Since(began))
	}
}

// Tagged processes that outlast every scan (ones an untagged parent
// outside their groups keeps starting) make it give up after its
// patience and fail, naming them, rather than claim success.
func TestSearchKillReportsSurvivors(t *testing.T) {
	token := "oma-test-survive"
	survivor := exec.Command("/bin/sh", "-c", `exec setsid sleep 60`)
	survivor.Env = append(os.Environ(), glob.OwnerEnv+"="+token)
	if err := survivor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { survivor.Process.Kill(); survivor.Wait() })
	for deadline := time.Now().Add(5 * time.Second); len(taggedWith(glob.OwnerEnv+"="+token)) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no tagged process started")
		}
	}
	searchKillSignal = func(int, uint64, syscall.Signal) {}
	t.Cleanup(func() { searchKillSignal = signalSame })

	var stdout, stderr bytes.Buffer
	began := time.Now()
	code, err := RunBuiltin(agentwire.BuiltinSearchKill, glob.CleanupArgs(glob.OwnerEnv, token), nil, &stdout, &stderr)
	want := fmt.Sprintf("processes tagged %s remain: [%d]", token, survivor.Process.Pid)
	if err != nil || code != 1 || !strings.Contains(stderr.String(), want) {
		t.Fatalf("exit %d (%v), stderr %q; want exit 1 and %q", code, err, stderr.String(), want)
	}
	if took := time.Since(began); took < searchKillPatience {
		t.Errorf("gave up after %v, before its patience of %v", took, searchKillPatience)
	}
}

func TestSearchKillRefusesMalformedRequests(t *testing.T) {
	for _, args := range [][]string{
		{glob.OwnerEnv},
		{"PATH", "x"},
		{glob.OwnerEnv, ""},
		{grep.OwnerEnv, "a\x00b"},
	} {
		var stderr bytes.Buffer
		code, err := RunBuiltin(agentwire.BuiltinSearchKill, args, nil, &bytes.Buffer{}, &stderr)
		if err != nil || code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d (%v), stderr %q; want 2 and a word", args, code, err, stderr.String())
		}
	}
}
