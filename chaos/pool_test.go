//go:build unix

package chaos

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// runPool runs every session once, and session k draws the same numbers
// whichever worker takes it, so a seed replays a run.
func TestRunPool(t *testing.T) {
	draws := func(workers int) map[int]uint64 {
		var mu sync.Mutex
		got := map[int]uint64{}
		runPool(workers, 20, 7, func(_, k int, rng *rand.Rand) {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := got[k]; dup {
				t.Errorf("session %d ran twice", k)
			}
			got[k] = rng.Uint64()
		})
		return got
	}
	one, four := draws(1), draws(4)
	if len(one) != 20 || len(four) != 20 {
		t.Fatalf("ran %d and %d sessions, want 20", len(one), len(four))
	}
	for k, v := range one {
		if four[k] != v {
			t.Errorf("session %d drew %d on one worker, %d on four", k, v, four[k])
		}
	}
}
