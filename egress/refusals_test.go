package egress

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// An endless stream of refused destinations keeps MaxRefusals notes and
// one line saying there were more.
func TestRefusalsAreBounded(t *testing.T) {
	var r Refusals
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			r.Add(&RefusedError{Dest: fmt.Sprintf("10.0.0.%d:80", i%250), Kind: NotAllowed, Reason: "not allowed"})
		})
	}
	wg.Wait()
	notes := r.Notes()
	assert.Len(t, notes, MaxRefusals+1)
	assert.Equal(t, "egress refused more destinations", notes[MaxRefusals])
	assert.Regexp(t, `^egress refused 10\.0\.0\.[0-9]+:80: not allowed$`, notes[0])
}
