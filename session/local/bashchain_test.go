package local

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBashChain(t *testing.T) {
	id := func(c byte) string { return strings.Repeat(string(c), callIDLen) }
	take := func(c BashChain) [2]any { next, before := c.Take(); return [2]any{next, before} }
	t.Run("none before", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		assert.Equal(t, [2]any{"", false}, take(c))
	})
	t.Run("a call that named none", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		c.Leave("")
		assert.Equal(t, [2]any{"", true}, take(c))
		assert.Equal(t, [2]any{"", false}, take(c), "taken: the next call's Leave marks it again")
	})
	t.Run("an id left", func(t *testing.T) {
		c := BashChain{dir: t.TempDir()}
		c.Leave(id('a'))
		c.Leave("")
		assert.Equal(t, [2]any{id('a'), true}, take(c), "a call that named none leaves a waiting id where it is")
		c.Leave(id('a'))
		c.Leave(id('b'))
		assert.Equal(t, [2]any{id('b'), true}, take(c), "a later id replaces it")
		assert.Equal(t, [2]any{"", false}, take(c))
	})
	t.Run("not an id", func(t *testing.T) {
		for _, bad := range []string{"../../etc/passwd", id('A'), id('a') + "0", id('a')[1:], id('g')} {
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
		assert.Empty(t, names, "claims are removed")
	})
	t.Run("no state directory", func(t *testing.T) {
		c := BashChain{dir: filepath.Join(t.TempDir(), "gone")}
		c.Leave(id('d'))
		assert.Equal(t, [2]any{"", false}, take(c))
	})
}
