package transfer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// One mount's path may not be a directory another mount needs: the guest's
// extract would replace the file by that directory, and the call would
// report both placed while the file is gone.
func TestMaterializeRefusesAFileWhereAnotherNeedsADirectory(t *testing.T) {
	s := &counted{Session: sessiontest.NewHost(t)}
	p := s.Paths()
	for name, mounts := range map[string][]transfer.Mount{
		"file first": {mount(transfer.Upload, p.Uploads+"/a", "file"), mount(transfer.Upload, p.Uploads+"/a/b", "below")},
		"file last":  {mount(transfer.Upload, p.Uploads+"/d/e/f", "below"), mount(transfer.Upload, p.Uploads+"/d", "file")},
		"skills":     {mount(transfer.Skill, p.Skills+"/s/scripts", "file"), mount(transfer.Skill, p.Skills+"/s/scripts/run.sh", "#!/bin/sh\n")},
	} {
		err := transfer.Materialize(context.Background(), s, mounts)
		assert.ErrorIs(t, err, transfer.ErrPath, name)
	}
	assert.EqualValues(t, 0, s.n.Load(), "nothing reaches the guest")
	assert.Equal(t, "", sh(t, s, "ls -A "+p.Uploads), "nothing was written")

	// Siblings that only share a prefix are fine.
	ok := []transfer.Mount{mount(transfer.Upload, p.Uploads+"/a", "file"), mount(transfer.Upload, p.Uploads+"/a-b/c", "c"), mount(transfer.Upload, p.Uploads+"/ab", "ab")}
	assert.NoError(t, transfer.Materialize(context.Background(), s, ok))
}
