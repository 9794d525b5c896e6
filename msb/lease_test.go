//go:build linux

package msb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestMigrationLockPath(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"HOME=/h", "MSB_HOME=/m"}, "/m/db/msb.db.migration.lock"},
		{[]string{"MSB_HOME=/m", "HOME=/h", "MSB_HOME=/n"}, "/n/db/msb.db.migration.lock"},
		{[]string{"HOME=/h"}, "/h/.microsandbox/db/msb.db.migration.lock"},
		{[]string{"PATH=/bin"}, ""},
	} {
		if got := migrationLockPath(tt.env); got != tt.want {
			t.Errorf("migrationLockPath(%q) = %q, want %q", tt.env, got, tt.want)
		}
	}
}

// lockMigration plays an msb opening its database in a new home: it holds
// the home's migration lock until the returned release.
func lockMigration(t *testing.T) (home string, release func()) {
	t.Helper()
	home = t.TempDir()
	path := filepath.Join(home, migrationLock)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return home, func() { f.Close() }
}

// runCancelledOnOutput runs msb list in the background, cancelled at its
// first output, and sends Run's error.
func runCancelledOnOutput(t *testing.T, cli *CLI) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := cli.Run(ctx, Call{Args: []string{"list"}, Stdout: func([]byte) { cancel() }})
		done <- err
	}()
	return done
}

// A cancelled call's msb is killed only once no msb holds the migration
// lock of its home: the one that does may be inside msb's install lease,
// which a kill there leaves held for 30 minutes. Both ways of killing msb
// wait: Run's cancellation and a started Process's Kill.
func TestKillWaitsForTheMigrationLock(t *testing.T) {
	for _, how := range []string{"run", "start"} {
		t.Run(how, func(t *testing.T) {
			home, release := lockMigration(t)
			cli := &CLI{Path: fakeMSB(t, `echo up; exec sleep 300`), Env: []string{"MSB_HOME=" + home}}
			var done <-chan error
			switch how {
			case "run":
				done = runCancelledOnOutput(t, cli)
			case "start":
				p, err := cli.Start(context.Background(), Call{Args: []string{"list"}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Stdout.Read(make([]byte, 3)); err != nil {
					t.Fatal(err)
				}
				killed := make(chan error, 1)
				go func() {
					p.Kill()
					killed <- p.Wait()
				}()
				done = killed
			}
			select {
			case err := <-done:
				t.Fatalf("msb was killed while another held the migration lock (%v)", err)
			case <-time.After(300 * time.Millisecond):
			}
			release()
			select {
			case err := <-done:
				if !errors.Is(err, ErrAborted) {
					t.Fatalf("err = %v, want ErrAborted", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("msb was not killed once the migration lock was free")
			}
		})
	}
}

// An msb that holds the lock for good does not hold the kill longer than
// migrationLockWait.
func TestKillWaitsForTheMigrationLockAWhileOnly(t *testing.T) {
	defer func(wait time.Duration) { migrationLockWait = wait }(migrationLockWait)
	migrationLockWait = 200 * time.Millisecond
	home, _ := lockMigration(t)
	cli := &CLI{Path: fakeMSB(t, `echo up; exec sleep 300`), Env: []string{"MSB_HOME=" + home}}
	select {
	case err := <-runCancelledOnOutput(t, cli):
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("err = %v, want ErrAborted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a held migration lock holds the kill for good")
	}
}
