//go:build unix

package outputs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// entries builds a listing: the unnamed count, then 5-field records.
func entries(unnamed int, recs ...[5]string) []byte {
	var b bytes.Buffer
	b.WriteString(strconv.Itoa(unnamed))
	b.WriteByte(0)
	for _, r := range recs {
		for _, f := range r {
			b.WriteString(f)
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

func file(path, content string) [5]string {
	return [5]string{path, "f", "1", strconv.Itoa(len(content)), sum(content)}
}

func reasons(l *Listing) map[string]string {
	m := map[string]string{}
	for _, r := range l.Refused {
		m[r.Path] = r.Reason
	}
	return m
}

func TestParseListingDecidesPerEntry(t *testing.T) {
	data := entries(2,
		file(".git/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n"),
		file(".vscode/tasks.json", "{}"),
		file("a.txt", "abc"),
		[5]string{"big.bin", "f", "1", "26214401", ""},
		[5]string{"dir/sub/b c.bin", "f", "1", "0", strings.ToUpper(sum(""))},
		[5]string{"hard1", "f", "2", "1", sum("x")},
		[5]string{"link", "l", "1", "11", ""},
		[5]string{"locked", "d", "1", "0", ""},
		[5]string{"n\nl", "f", "1", "1", ""},
		[5]string{"pipe", "p", "1", "0", ""},
		file("proj/.GIT", "gitdir: /x"),
		file("proj/.bashrc", "evil"),
		file("proj/.bashrc.", "evil"),
		file("proj/.git. /config", "evil"),
		[5]string{"zz", "f", "1", "1", ""},
	)
	l, err := ParseListing(data, Policy{})
	require.NoError(t, err)
	assert.Equal(t, []Record{
		{Path: "a.txt", Size: 3, SHA256: sum("abc")},
		{Path: "dir/sub/b c.bin", Size: 0, SHA256: sum("")},
	}, l.Records)
	assert.Equal(t, 2, l.Unlisted)
	got := reasons(l)
	assert.Len(t, got, 13)
	assert.Contains(t, got[".git/config"], `".git" may make host programs run code`)
	assert.Contains(t, got[".vscode/tasks.json"], `".vscode"`)
	assert.Contains(t, got["proj/.GIT"], `".git"`, "case-insensitive, a .git file too")
	assert.Contains(t, got["proj/.bashrc"], `".bashrc"`)
	assert.Contains(t, got["proj/.bashrc."], `".bashrc"`, "trailing dots, which Windows and vfat drop")
	assert.Contains(t, got["proj/.git. /config"], `".git"`, "trailing dots and spaces")
	assert.Equal(t, "26214401 bytes, more than the limit of 26214400 per file", got["big.bin"])
	assert.Equal(t, "a hard link (2 names for one file)", got["hard1"])
	assert.Equal(t, "a symbolic link (not followed)", got["link"])
	assert.Contains(t, got["locked"], "cannot be read")
	assert.Equal(t, "unsafe name: control character in path", got["n\nl"])
	assert.Equal(t, "a named pipe", got["pipe"])
	assert.Equal(t, "listed without a sha256", got["zz"])

	// Named paths are collected with everything below them.
	l, err = ParseListing(data, Policy{Allow: []string{".vscode", "proj/.bashrc", ".git/conf"}})
	require.NoError(t, err)
	assert.Equal(t, []string{".vscode/tasks.json", "a.txt", "dir/sub/b c.bin", "proj/.bashrc"}, recordPaths(l))
	assert.Contains(t, reasons(l), ".git/config", "a prefix that is not a whole segment allows nothing")

	l, err = ParseListing(entries(0), Policy{})
	require.NoError(t, err)
	assert.Empty(t, l.Records)
	assert.Empty(t, l.Refused)
}

func recordPaths(l *Listing) []string {
	var p []string
	for _, r := range l.Records {
		p = append(p, r.Path)
	}
	return p
}

func TestParseListingLimitsTakeWhatFits(t *testing.T) {
	data := entries(0, file("a", "123456"), file("b", "12345"), file("c", "1234"), file("d", "1"))
	l, err := ParseListing(data, Policy{Limits: Limits{MaxBytes: 10}})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c"}, recordPaths(l), "b does not fit, the smaller c still does")
	assert.Equal(t, []Refusal{
		{"b", "5 bytes would pass the limit of 10 in all"},
		{"d", "1 bytes would pass the limit of 10 in all"},
	}, l.Refused)

	l, err = ParseListing(data, Policy{Limits: Limits{MaxFiles: 2, MaxFileBytes: 5}})
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "c"}, recordPaths(l))
	assert.Equal(t, []Refusal{
		{"a", "6 bytes, more than the limit of 5 per file"},
		{"d", "more than 2 files"},
	}, l.Refused)
}

func TestParseListingRefusesMalformed(t *testing.T) {
	h := sum("")
	ok := func(p string) [5]string { return [5]string{p, "f", "1", "0", h} }
	with := func(p string, i int, v string) [5]string { r := ok(p); r[i] = v; return r }
	many := make([][5]string, 201)
	for i := range many {
		many[i] = ok(strconv.Itoa(1000 + i))
	}
	cases := []struct {
		name   string
		data   []byte
		record int
		text   string
	}{
		{"empty", nil, -1, "does not end with NUL"},
		{"no final NUL", bytes.TrimSuffix(entries(0, ok("a")), []byte{0}), -1, "does not end with NUL"},
		{"no count", bytes.TrimPrefix(entries(0, ok("a")), []byte("0\x00")), -1, "not a count and records of 5"},
		{"four fields", []byte("0\x00a\x00f\x001\x000\x00"), -1, "not a count and records of 5"},
		{"bad count", entries(0, ok("a"))[1:], -1, "invalid count"},
		{"negative count", append([]byte("-1"), entries(0, ok("a"))[1:]...), -1, "invalid count"},
		{"too many", entries(0, many...), -1, "names 201 entries, more than 200"},
		{"repeated", entries(0, ok("a"), ok("a")), 1, "out of byte order or repeated"},
		{"out of order", entries(0, ok("b"), ok("a")), 1, "out of byte order"},
		{"long type", entries(0, with("a", 1, "fl")), 0, "invalid type"},
		{"empty type", entries(0, with("a", 1, "")), 0, "invalid type"},
		{"zero links", entries(0, with("a", 2, "0")), 0, "invalid link count"},
		{"bad links", entries(0, with("a", 2, "1x")), 0, "invalid link count"},
		{"negative size", entries(0, with("a", 3, "-1")), 0, "invalid size"},
		{"leading zero", entries(0, with("a", 3, "01")), 0, "invalid size"},
		{"overflow size", entries(0, with("a", 3, "9999999999999999999")), 0, "invalid size"},
		{"short sha", entries(0, with("a", 4, h[:63])), 0, "invalid sha256"},
		{"sha with name", entries(0, with("a", 4, h+"  a")), 0, "invalid sha256"},
		{"file and dir", entries(0, ok("a"), ok("a/b")), 1, `parent "a" is listed as a file`},
		{"link and dir", entries(0, with("a", 1, "l"), ok("a/b")), 0, `parent "a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := ParseListing(c.data, Policy{})
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, ErrUnsafeOutput)
			var le *ListingError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, c.record, le.Record)
			assert.Contains(t, err.Error(), c.text)
		})
	}
	// Unsafe names refuse their entry only; they never become host paths.
	for _, p := range []string{"/etc/passwd", "../x", "a/../../b", "./a", "a//b", `a\b`, "a\x7f", "a\xff", "d/" + strings.Repeat("n", 256)} {
		l, err := ParseListing(entries(0, ok(p)), Policy{})
		require.NoError(t, err, "%q", p)
		assert.Empty(t, l.Records, "%q", p)
		require.Len(t, l.Refused, 1)
		assert.Contains(t, l.Refused[0].Reason, "unsafe name", "%q", p)
	}
}

func TestLimits(t *testing.T) {
	assert.Equal(t, DefaultLimits, Limits{}.normalized())
	assert.Equal(t, Limits{MaxFiles: 3, MaxFileBytes: DefaultMaxFileBytes, MaxBytes: 7}, Limits{MaxFiles: 3, MaxFileBytes: -1, MaxBytes: 7}.normalized())
	assert.Equal(t, int64(200*(4096+1+19+19+64+5)+20), DefaultLimits.MaxListingBytes())
}

func TestPolicyCheckAllow(t *testing.T) {
	assert.NoError(t, Policy{Allow: []string{".git", "a/.bashrc"}}.CheckAllow())
	for _, a := range []string{"", "/abs", "../x", "a/", "a\nb"} {
		assert.Error(t, Policy{Allow: []string{a}}.CheckAllow(), "%q", a)
	}
	assert.Contains(t, DeniedNames(), ".git")
}

// rawRecords splits a script's output for checks the parser does not make.
func FuzzParseListing(f *testing.F) {
	h := sum("")
	f.Add(entries(0, file("a.txt", "abc")))
	f.Add(entries(3, file("a/b/c", ""), [5]string{"d", "f", "1", "12", strings.ToUpper(h)}))
	f.Add(entries(0, file("../x", "")))
	f.Add(entries(0, file("/abs", "")))
	f.Add(entries(0, [5]string{"a/./b", "f", "1", "01", h}))
	f.Add(entries(0, file("a", ""), file("a/b", "")))
	f.Add(entries(0, file(`a\b`, "")))
	f.Add(entries(1, file(".git/config", "x"), [5]string{"l", "l", "1", "3", ""}, [5]string{"h", "f", "2", "0", h}))
	f.Add(entries(0, file("x/.BASHRC", "")))
	f.Add([]byte("0\x00a\x000\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		policy := Policy{Limits: Limits{MaxFiles: 5, MaxFileBytes: 1000, MaxBytes: 2000}, Allow: []string{"ok/.git"}}
		l, err := ParseListing(data, policy)
		if err != nil {
			var le *ListingError
			if !errors.As(err, &le) || !errors.Is(err, ErrUnsafeOutput) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(l.Records) > policy.MaxFiles || l.Unlisted < 0 {
			t.Fatalf("%d records, %d unlisted", len(l.Records), l.Unlisted)
		}
		seen := map[string]bool{}
		for _, r := range l.Refused {
			if r.Reason == "" || seen[r.Path] {
				t.Fatalf("refusal %+v", r)
			}
			seen[r.Path] = true
		}
		var total int64
		base := filepath.FromSlash("/base/dir")
		for _, r := range l.Records {
			if r.Path == "" || strings.HasPrefix(r.Path, "/") || slices.Contains(strings.Split(r.Path, "/"), "..") {
				t.Fatalf("unsafe path %q accepted", r.Path)
			}
			if !filepath.IsLocal(r.Path) || seen[r.Path] {
				t.Fatalf("path %q accepted", r.Path)
			}
			seen[r.Path] = true
			if reason := policy.denied(r.Path); reason != "" {
				t.Fatalf("denied path %q accepted", r.Path)
			}
			for seg := range strings.SplitSeq(r.Path, "/") {
				if strings.EqualFold(seg, ".git") && !strings.HasPrefix(r.Path, "ok/.git/") {
					t.Fatalf(".git path %q accepted", r.Path)
				}
			}
			joined, err := SafeJoin(base, r.Path)
			if err != nil {
				t.Fatalf("SafeJoin(%q): %v", r.Path, err)
			}
			if !strings.HasPrefix(joined, base+string(filepath.Separator)) {
				t.Fatalf("SafeJoin(%q) = %q", r.Path, joined)
			}
			if r.Size < 0 || r.Size > policy.MaxFileBytes {
				t.Fatalf("size %d accepted", r.Size)
			}
			total += r.Size
			if _, err := hex.DecodeString(r.SHA256); err != nil || len(r.SHA256) != 64 || strings.ToLower(r.SHA256) != r.SHA256 {
				t.Fatalf("checksum %q accepted", r.SHA256)
			}
		}
		if total > policy.MaxBytes {
			t.Fatalf("total %d accepted", total)
		}
	})
}
