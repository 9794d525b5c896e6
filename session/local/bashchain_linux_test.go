package local

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

func TestBashChain(t *testing.T) {
	id := func(c byte) string { return strings.Repeat(string(c), bashproto.IDLen) }
	take := func(c BashChain) [2]any { next, before := c.Take(); return [2]any{next, before} }
	t.Run("none before", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		assert.Equal(t, [2]any{"", false}, take(c))
	})
	t.Run("a call that named none", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		c.Leave("")
		assert.Equal(t, [2]any{"", true}, take(c))
		assert.Equal(t, [2]any{"", true}, take(c))
	})
	t.Run("an id left", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		c.Leave(id('a'))
		c.Leave("")
		assert.Equal(t, [2]any{id('a'), true}, take(c), "a call that named none leaves a waiting id where it is")
		assert.Equal(t, [2]any{"", true}, take(c), "taken once")
		c.Leave(id('a'))
		c.Leave(id('b'))
		assert.Equal(t, [2]any{id('b'), true}, take(c), "a later id replaces it")
		c.Leave("")
		assert.Equal(t, [2]any{"", true}, take(c), "a call that named none after it was taken")
	})
	t.Run("not an id", func(t *testing.T) {
		for _, bad := range []string{"", "../../etc/passwd", id('A'), id('a')[1:], id('g'), noneWaiting} {
			c := BashChain{dir: t.TempDir()}
			require.NoError(t, os.WriteFile(filepath.Join(c.dir, bashNextFile), []byte(bad), 0o600))
			assert.Equal(t, [2]any{"", true}, take(c), "%q", bad)
		}
	})
	t.Run("taken by one of many at once", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		c.Leave(id('c'))
		var wg sync.WaitGroup
		got := make([]string, 16)
		for i := range got {
			wg.Go(func() { got[i], _ = c.Take() })
		}
		wg.Wait()
		assert.Equal(t, 1, strings.Count(strings.Join(got, " "), id('c')), "%q", got)
		names, err := os.ReadDir(c.dir)
		require.NoError(t, err)
		require.Len(t, names, 1, "one file, written in place")
		assert.Equal(t, bashNextFile, names[0].Name())
	})
	t.Run("held by another", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		c.Leave(id('d'))
		f, err := os.Open(filepath.Join(c.dir, bashNextFile))
		require.NoError(t, err)
		require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
		assert.Equal(t, [2]any{"", true}, take(c), "a held lock is not waited for")
		c.Leave(id('e'))
		require.NoError(t, f.Close())
		assert.Equal(t, [2]any{id('d'), true}, take(c), "nor written under")
	})
	t.Run("a link in its place", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		target := filepath.Join(t.TempDir(), "target")
		require.NoError(t, os.WriteFile(target, []byte(id('h')), 0o600))
		require.NoError(t, os.Symlink(target, filepath.Join(c.dir, bashNextFile)))
		assert.Equal(t, [2]any{"", true}, take(c), "the link is not followed")
		c.Leave(id('i'))
		got, err := os.ReadFile(target)
		require.NoError(t, err)
		assert.Equal(t, id('h'), string(got), "nor written through")
	})
	t.Run("a FIFO in its place", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		require.NoError(t, unix.Mkfifo(filepath.Join(c.dir, bashNextFile), 0o600))
		done := make(chan [2]any, 1)
		go func() {
			c.Leave(id('j'))
			done <- take(c)
		}()
		select {
		case got := <-done:
			assert.Equal(t, [2]any{"", true}, got)
		case <-time.After(10 * time.Second):
			t.Fatal("the chain waits on a FIFO")
		}
	})
	t.Run("no state directory", func(t *testing.T) {
		c := BashChain{dir: filepath.Join(t.TempDir(), "gone")}
		c.Leave(id('f'))
		assert.Equal(t, [2]any{"", false}, take(c))
	})
}

// TestBashChainLeaveIgnoresWhatIsNotAnID: Leave given something other than
// an id (or "") changes nothing; it never leaves Take an id that no call
// named, spliced from its bytes and an earlier id's.
func TestBashChainLeaveIgnoresWhatIsNotAnID(t *testing.T) {
	a := strings.Repeat("a", bashproto.IDLen)
	for _, bad := range []string{"bb", "ffff", a[1:] + "g", a + "ff", "../x"} {
		c := BashChain{dir: t.TempDir()}
		c.Leave(a)
		c.Leave(bad)
		next, before := c.Take()
		assert.Equal(t, a, next, "Take after Leave(%q)", bad)
		assert.True(t, before)
		fi, err := os.Stat(filepath.Join(c.dir, bashNextFile))
		require.NoError(t, err)
		assert.EqualValues(t, bashproto.IDLen, fi.Size(), "Leave(%q) grew the file", bad)
	}
}
