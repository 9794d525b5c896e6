//go:build linux

package microvm_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// A guest that spends nothing on a sparse file with three more names
// costs a fork no more: the volume's copy keeps one inode, holes and all.
func TestForkKeepsHolesAndHardLinks(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src := createSession(t, options(env))
	shellOut(t, src, `truncate -s 256M f && printf end >>f && ln f l1 && ln f l2 && mkdir d && ln f d/l3`)
	fork, err := src.Fork(ctx, forkOptions(env))
	require.NoError(t, err)
	t.Cleanup(func() { _ = fork.Close(context.Background()) })

	var blocks int64
	inodes := map[uint64]bool{}
	require.NoError(t, filepath.WalkDir(volumePath(t, env, fork.Names().Volume), func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG && !inodes[st.Ino] {
			inodes[st.Ino] = true
			blocks += st.Blocks
		}
		return nil
	}))
	assert.Len(t, inodes, 1, "one file, four names")
	assert.LessOrEqual(t, blocks*512, int64(1<<20), "the copy's blocks")
	assert.Equal(t, "4 268435459\nend", shellOut(t, fork, `stat -c '%h %s' d/l3; tail -c 3 l1`))
}
