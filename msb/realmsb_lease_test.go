//go:build linux

package msb

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
)

// migrationWatch watches a real msb home's migration lock from outside, as
// another msb would.
type migrationWatch struct {
	f    *os.File
	cli  *CLI
	hold time.Duration // how long the msb last measured held it
}

func watchMigration(t *testing.T, cli *CLI, home string) *migrationWatch {
	t.Helper()
	// The first command makes the home and its lock file.
	if _, err := cli.Run(context.Background(), Call{Args: []string{"list"}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(home, migrationLock))
	if err != nil {
		t.Fatalf("msb %s made no migration lock where it is expected: %v", realmsb.Version, err)
	}
	t.Cleanup(func() { f.Close() })
	w := &migrationWatch{f: f, cli: cli}
	w.measure(t)
	if w.hold == 0 {
		t.Fatalf("msb %s was never seen holding %s", realmsb.Version, migrationLock)
	}
	return w
}

// measure times how long one msb list holds the lock, as the machine's load
// makes it now; a hold it does not see leaves the last one.
func (w *migrationWatch) measure(t *testing.T) {
	t.Helper()
	cmd := exec.Command(w.cli.Path, "list")
	cmd.Env = append(os.Environ(), w.cli.Env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if w.taken(nil) {
		start := time.Now()
		for w.locked() {
		}
		w.hold = time.Since(start)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// locked tells whether another process holds the lock now.
func (w *migrationWatch) locked() bool {
	if syscall.Flock(int(w.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return true
	}
	syscall.Flock(int(w.f.Fd()), syscall.LOCK_UN)
	return false
}

// taken waits up to 10 s, or until stop is closed, for another process to
// hold the lock.
func (w *migrationWatch) taken(stop <-chan struct{}) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-stop:
			return false
		default:
		}
		if w.locked() {
			return true
		}
	}
	return false
}

// whileHeld waits until an msb holds the lock, then for a random part of
// the time the first msb watched held it; it gives up once stop is closed.
func (w *migrationWatch) whileHeld(stop <-chan struct{}) {
	if w.taken(stop) {
		time.Sleep(rand.N(w.hold))
	}
}

// TestRealMSBInstallLease: an msb killed while it opens its database can
// leave its install lease held, and every msb command then refuses for 30
// minutes. Run names that refusal, and its own kills never leave the lease.
func TestRealMSBInstallLease(t *testing.T) {
	t.Run("left by a kill, named", func(t *testing.T) {
		env := realmsb.New(t)
		cli := &CLI{Path: env.Bin, Env: env.Environ()}
		w := watchMigration(t, cli, env.Home)
		for i := range 1000 {
			if i%10 == 9 {
				w.measure(t) // the kills follow the load
			}
			cmd := exec.Command(env.Bin, "list")
			cmd.Env = append(os.Environ(), cli.Env...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.whileHeld(nil)
			cmd.Process.Kill()
			cmd.Wait()
			_, err := cli.Run(context.Background(), Call{Args: []string{"list"}})
			if err == nil {
				continue
			}
			var e *ExitError
			if !errors.As(err, &e) || !errors.Is(err, ErrInstallInProgress) {
				t.Fatalf("msb list after a kill: %v, want ErrInstallInProgress or success", err)
			}
			if left := time.Until(e.RetryAt); left < 25*time.Minute || left > 31*time.Minute {
				t.Errorf("RetryAt %v is %v away, want about 30 minutes", e.RetryAt, left)
			}
			return
		}
		t.Fatalf("1000 kills of msb %s while it held its migration lock (last hold %v) left no install lease: msb changed, and the runner's wait may be needless", realmsb.Version, w.hold)
	})
	t.Run("never left by a cancelled Run", func(t *testing.T) {
		env := realmsb.New(t)
		cli := &CLI{Path: env.Bin, Env: env.Environ()}
		w := watchMigration(t, cli, env.Home)
		for i := range 120 {
			ctx, cancel := context.WithCancel(context.Background())
			stop, watched := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(watched)
				w.whileHeld(stop)
				cancel()
			}()
			_, err := cli.Run(ctx, Call{Args: []string{"list"}})
			// The watch ends with the call: one goroutine uses the lock file.
			close(stop)
			<-watched
			cancel()
			if err != nil && !errors.Is(err, ErrAborted) {
				t.Fatalf("cancelled msb list %d: %v", i, err)
			}
			if _, err := cli.Run(context.Background(), Call{Args: []string{"list"}}); err != nil {
				t.Fatalf("msb list after cancelled call %d: %v", i, err)
			}
		}
	})
}
