package session_test

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

var msbName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Any ids of any length or charset yield valid msb names that pair up.
func TestNamesAlwaysValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09-_./ ~é日\x00\n-")
	randomID := func() string {
		n := r.IntN(300)
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := 0; i < 2000; i++ {
		prefix := []string{"", "oma", "My Prefix", strings.Repeat("p", 40)}[i%4]
		n := session.NewNames(prefix, randomID(), randomID(), time.UnixMilli(r.Int64N(1<<42)), r.Uint64())
		for _, name := range []string{n.Sandbox, n.Volume} {
			require.LessOrEqual(t, len(name), 128, name)
			require.Regexp(t, msbName, name)
			require.NoError(t, msb.ValidateName("name", name))
		}
		if prefix == "" {
			prefix = session.DefaultPrefix
		}
		stem, ok := session.SandboxStem(prefix, n.Sandbox)
		require.True(t, ok, n.Sandbox)
		require.Equal(t, n.Stem, stem)
		stem, ok = session.VolumeStem(prefix, n.Volume)
		require.True(t, ok, n.Volume)
		require.Equal(t, n, session.NamesFromStem(stem))
	}
}

func TestLongIDsStayDistinct(t *testing.T) {
	long := strings.Repeat("workspace", 20)
	a := session.NewNames("oma", long+"a", "s", time.Unix(0, 0), 1)
	b := session.NewNames("oma", long+"b", "s", time.Unix(0, 0), 1)
	assert.NotEqual(t, a.Stem, b.Stem, "a hash keeps truncated ids apart")
}

func TestForeignNamesAreNotOurs(t *testing.T) {
	for _, name := range []string{"box1", "oma-x-sandbox", "other-ws-s-abc-000000-sandbox", "oma-ws-s-abc-000000-workspace"} {
		_, ok := session.SandboxStem("oma", name)
		assert.False(t, ok, name)
	}
	_, ok := session.VolumeStem("oma", "oma-ws-s-abc-000000-sandbox")
	assert.False(t, ok)
}
