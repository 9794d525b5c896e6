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

// A prefix is one that names keep unchanged and that no other prefix's
// names can begin with: no dash, since a name's first dash ends its prefix.
func TestCheckPrefix(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, ok := range []string{"", "oma", "ci", "a.b_c", "0123456789abcdef"} {
		require.NoError(t, session.CheckPrefix(ok), ok)
		n := session.NewNames(ok, "ws", "sess", now, 1)
		stem, found := session.SandboxStem(ok, n.Sandbox)
		assert.True(t, found, ok)
		assert.Equal(t, n.Stem, stem)
		if ok != "" {
			assert.True(t, strings.HasPrefix(n.Stem, ok+"-"), "%q names %q", ok, n.Stem)
		}
	}
	for _, bad := range []string{"oma-ci", "-", "OMA", "x!", "a b", "0123456789abcdefg", ".a", "a_", "_"} {
		assert.ErrorContains(t, session.CheckPrefix(bad), "want 1 to 16 characters of a-z, 0-9, _ and .", bad)
	}
}

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
		// Any time from 1972 (8 base-36 digits) to 36^9 ms after 1970.
		ms := int64(78364164096) + r.Int64N(101559956668416-78364164096)
		n := session.NewNames(prefix, randomID(), randomID(), time.UnixMilli(ms), r.Uint64())
		for _, name := range []string{n.Sandbox, n.Volume, session.SnapshotName(n.Stem)} {
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
		stem, ok = session.SnapshotStem(prefix, session.SnapshotName(n.Stem))
		require.True(t, ok)
		require.Equal(t, n.Stem, stem)
		when, ok := session.StemTime(prefix, stem)
		require.True(t, ok)
		require.Equal(t, ms, when.UnixMilli())
	}
}

func TestLongIDsStayDistinct(t *testing.T) {
	long := strings.Repeat("workspace", 20)
	a := session.NewNames("oma", long+"a", "s", time.Unix(0, 0), 1)
	b := session.NewNames("oma", long+"b", "s", time.Unix(0, 0), 1)
	assert.NotEqual(t, a.Stem, b.Stem, "a hash keeps truncated ids apart")
}

func TestForeignNamesAreNotOurs(t *testing.T) {
	ours := session.NewNames("oma", "ws", "s", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), 42)
	require.Equal(t, "oma-ws-s-mx37udc0-000016-sandbox", ours.Sandbox, "the grammar this test varies")
	for _, name := range []string{
		"box1", "oma-x-sandbox", "other-ws-s-abc-000000-sandbox", "oma-ws-s-abc-000000-workspace",
		"oma-ws-s-mx37udc0-000016-workspace",                            // a volume name
		"oma-ws-s-mx37udc-000016-sandbox",                               // time of 7 digits
		"oma-ws-s-0x37udc0-000016-sandbox",                              // time with a leading zero
		"oma-ws-s-mx37udc0ww-000016-sandbox",                            // time of 10 digits
		"oma-ws-s-mX37udc0-000016-sandbox",                              // upper case
		"oma-ws-s-mx37udc0-00016-sandbox",                               // random part of 5
		"oma-ws-s-mx37udc0-0000016-sandbox",                             // random part of 7
		"oma-ws-mx37udc0-000016-sandbox",                                // no session part
		"oma--s-mx37udc0-000016-sandbox",                                // empty workspace part
		"oma-ws-.s-mx37udc0-000016-sandbox",                             // a part starting with '.'
		"oma-ws-s_-mx37udc0-000016-sandbox",                             // a part ending with '_'
		"oma-ws--s-mx37udc0-000016-sandbox",                             // a double dash
		"oma-" + strings.Repeat("w", 25) + "-s-mx37udc0-000016-sandbox", // part over 24
	} {
		_, ok := session.SandboxStem("oma", name)
		assert.False(t, ok, name)
	}
	for _, name := range []string{
		"oma-postgres-data-backup-workspace", // "data" is no time part
		"oma-app-cache-lz0abcde-workspace",   // no random part
		"oma-ws-s-mx37udc0-000016-sandbox",
	} {
		_, ok := session.VolumeStem("oma", name)
		assert.False(t, ok, name)
	}
	for _, name := range []string{
		"oma-ws-s-mx37udc0-000016-sandbox", "oma-ws-s-mx37udc0-000016-workspace",
		"oma-ws-s-mx37udc0-000016-snapshot-1", "before-pip-snapshot", "oma-ws-mx37udc0-000016-snapshot",
	} {
		_, ok := session.SnapshotStem("oma", name)
		assert.False(t, ok, name)
	}
	for _, name := range []string{
		"oma-ws-s-mx37udc0-000016-sandbox",
		"oma-my-ws-a.b_c-mx37udc0-zzzzzz-sandbox",                                                     // dashes inside the ids
		"oma-" + strings.Repeat("w", 24) + "-" + strings.Repeat("s", 24) + "-mx37udc0-000016-sandbox", // the longest ids
		"oma-ws-s-1mx37udc0-000016-sandbox",                                                           // a 9-digit time (after 2059)
	} {
		_, ok := session.SandboxStem("oma", name)
		assert.True(t, ok, name)
	}
}
