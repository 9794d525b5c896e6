package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/outputs"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// snapshot records a host tree without following links: each entry's type,
// mode and content (or link target).
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		m[rel] = v
		return nil
	})
	require.NoError(t, err)
	return m
}

func refusedPaths(r *transfer.Result) map[string]string {
	m := map[string]string{}
	for _, x := range r.Refused {
		m[x.Path] = x.Reason
	}
	return m
}

func filePaths(r *transfer.Result) []string {
	var p []string
	for _, f := range r.Files {
		p = append(p, f.Path)
	}
	return p
}

func collect(t *testing.T, s *counted, dest string, o transfer.CollectOptions) *transfer.Result {
	t.Helper()
	res, err := transfer.Collect(context.Background(), s, dest, o)
	require.NoError(t, err)
	return res
}

func TestCollect(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		out := s.Paths().Outputs
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p r/d && printf hello > r/a.txt && head -c 300000 /dev/urandom > r/d/b.bin && printf '{}' > c.json && ln -s /etc/passwd link && mkfifo pipe`, out))
		dest := t.TempDir()
		s.n.Store(0)
		res := collect(t, s, dest, transfer.CollectOptions{})
		assert.EqualValues(t, 2, s.n.Load(), "a listing and one fetch")
		require.Len(t, res.Files, 3)
		assert.Equal(t, map[string]string{"link": "a symbolic link (not followed)", "pipe": "a named pipe"}, refusedPaths(res))
		assert.True(t, res.Partial)
		byPath := map[string]transfer.File{}
		for _, f := range res.Files {
			byPath[f.Path] = f
			data, err := os.ReadFile(filepath.Join(dest, f.Path))
			require.NoError(t, err)
			sum := sha256.Sum256(data)
			assert.Equal(t, f.SHA256, hex.EncodeToString(sum[:]))
			assert.EqualValues(t, f.Size, len(data))
		}
		assert.Equal(t, "application/json", byPath["c.json"].MIMEType)
		assert.Equal(t, "text/plain", byPath["r/a.txt"].MIMEType)
		assert.Equal(t, filepath.Join(dest, "r/d/b.bin"), byPath["r/d/b.bin"].HostPath)
		names, _ := os.ReadDir(dest)
		assert.Len(t, names, 2, "r and c.json, no staging directory left")

		// Collecting again into the same place finds the same bytes there.
		again := collect(t, s, dest, transfer.CollectOptions{})
		assert.Len(t, again.Files, 3)
		assert.Len(t, again.Refused, 2)

		sh(t, s, fmt.Sprintf(`rm -rf %q/*`, out))
		missing := filepath.Join(t.TempDir(), "not", "yet")
		empty := collect(t, s, missing, transfer.CollectOptions{})
		assert.Empty(t, empty.Files)
		assert.False(t, empty.Partial)
		assert.NoDirExists(t, filepath.Dir(missing), "nothing to collect creates nothing")
	})
}

// One oversized file, or one file too many, no longer costs every output.
func TestCollectTakesWhatFits(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && echo '# answer' > answer.md && for i in $(seq 10); do echo $i > small$i.txt; done && head -c 30000000 /dev/zero > model.bin`, s.Paths().Outputs))
		dest := t.TempDir()
		res := collect(t, s, dest, transfer.CollectOptions{})
		assert.Len(t, res.Files, 11)
		assert.FileExists(t, filepath.Join(dest, "answer.md"))
		assert.Equal(t, []string{"model.bin"}, keys(refusedPaths(res)))
		assert.Equal(t, "30000000 bytes, more than the limit of 26214400 per file", res.Refused[0].Reason)
		assert.True(t, res.Partial)
		assert.NoFileExists(t, filepath.Join(dest, "model.bin"))

		sh(t, s, fmt.Sprintf(`cd %q && rm model.bin && for i in $(seq 100); do echo $i > many$i; done`, s.Paths().Outputs))
		dest = t.TempDir()
		res = collect(t, s, dest, transfer.CollectOptions{})
		assert.Len(t, res.Files, 100)
		assert.Len(t, res.Refused, 11)
		for _, r := range res.Refused {
			assert.Equal(t, "more than 100 files", r.Reason, r.Path)
		}
		assert.FileExists(t, filepath.Join(dest, "answer.md"))
	})
}

func keys(m map[string]string) []string {
	var k []string
	for p := range m {
		k = append(k, p)
	}
	return k
}

// A hard-linked pair beside report.txt used to fail the collection and
// delete the host's own report.txt.
func TestCollectNeverTouchesExistingHostFiles(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && printf guest > report.txt && printf same > same.txt && printf new > new.txt && printf x > pair1 && ln pair1 pair2 && printf nl > "$(printf 'new\nline')"`, s.Paths().Outputs))
		dest := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dest, "report.txt"), []byte("host"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dest, "same.txt"), []byte("same"), 0o600))
		res := collect(t, s, dest, transfer.CollectOptions{})
		assert.Equal(t, []string{"new.txt", "same.txt"}, filePaths(res), "a file already there with the same bytes counts")
		got := refusedPaths(res)
		assert.Contains(t, got["report.txt"], "exists on the host with other content; not replaced")
		assert.Contains(t, got["pair1"], "hard link")
		assert.Contains(t, got["pair2"], "hard link")
		assert.Contains(t, got["new\nline"], "control character")
		data, err := os.ReadFile(filepath.Join(dest, "report.txt"))
		require.NoError(t, err)
		assert.Equal(t, "host", string(data))

		res = collect(t, s, dest, transfer.CollectOptions{Overwrite: true})
		assert.Contains(t, filePaths(res), "report.txt")
		data, err = os.ReadFile(filepath.Join(dest, "report.txt"))
		require.NoError(t, err)
		assert.Equal(t, "guest", string(data), "replaced when asked")
	})
}

// Outputs must not plant what host programs run: git hooks and config, rc
// files, editor and agent settings.
func TestCollectRefusesDangerousPaths(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p .git/hooks sub .vscode .claude proj/.Git && printf '[core]\n\tfsmonitor = "touch /tmp/pwned"\n' > .git/config && printf 'ref: x' > .git/HEAD && printf '#!/bin/sh\nid\n' > .git/hooks/pre-commit && echo evil > .bashrc && echo '{}' > .vscode/tasks.json && echo '{}' > .claude/settings.json && echo gitdir > sub/.git && echo x > proj/.Git/config && echo ok > ok.txt`, s.Paths().Outputs))
		dest := t.TempDir() // a repository root
		require.NoError(t, os.MkdirAll(filepath.Join(dest, ".git"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dest, ".git", "config"), []byte("[core]\n"), 0o644))
		before := snapshot(t, dest)
		res := collect(t, s, dest, transfer.CollectOptions{Overwrite: true})
		assert.Equal(t, []string{"ok.txt"}, filePaths(res))
		got := refusedPaths(res)
		for _, p := range []string{".git/config", ".git/HEAD", ".git/hooks/pre-commit", ".bashrc", ".vscode/tasks.json", ".claude/settings.json", "sub/.git", "proj/.Git/config"} {
			assert.Contains(t, got[p], "may make host programs run code", p)
		}
		after := snapshot(t, dest)
		delete(after, "ok.txt")
		assert.Equal(t, before, after, "nothing else changed, even with overwrite")

		res = collect(t, s, dest, transfer.CollectOptions{Allow: []string{".vscode", "sub/.git"}})
		assert.Equal(t, []string{".vscode/tasks.json", "ok.txt", "sub/.git"}, filePaths(res), "named paths are collected")
	})
}

// dest's own subdirectories may be symlinks planted earlier: never followed.
func TestCollectNeverFollowsHostSymlinks(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p sub deep/er && echo in-sub > sub/x.txt && echo deep > deep/er/y.txt && echo top > top.txt && echo a > a.txt`, s.Paths().Outputs))
		outside := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(outside, "target"), []byte("host secret"), 0o600))
		dest := t.TempDir()
		require.NoError(t, os.Symlink(outside, filepath.Join(dest, "sub")))
		require.NoError(t, os.Mkdir(filepath.Join(dest, "deep"), 0o755))
		require.NoError(t, os.Symlink(outside, filepath.Join(dest, "deep", "er")))
		require.NoError(t, os.Symlink(filepath.Join(outside, "target"), filepath.Join(dest, "a.txt")))
		before := snapshot(t, outside)
		res := collect(t, s, dest, transfer.CollectOptions{Overwrite: true})
		assert.Equal(t, []string{"top.txt"}, filePaths(res))
		got := refusedPaths(res)
		assert.Contains(t, got["sub/x.txt"], "sub is a symbolic link on the host; not followed")
		assert.Contains(t, got["deep/er/y.txt"], "er is a symbolic link on the host")
		assert.Contains(t, got["a.txt"], "not a regular file; not replaced")
		assert.Equal(t, before, snapshot(t, outside))
		target, err := os.Readlink(filepath.Join(dest, "a.txt"))
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(outside, "target"), target)

		// dest itself is the caller's path and may be a link to a directory.
		link := filepath.Join(t.TempDir(), "dest-link")
		require.NoError(t, os.Symlink(t.TempDir(), link))
		res = collect(t, s, link, transfer.CollectOptions{})
		assert.Len(t, res.Files, 4)
	})
}

// The archive is checked entry by entry: an entry swapped after the listing
// (a symlink, a hard link, a directory, other bytes, gone) is refused, and
// the others are still collected.
func TestCollectRefusesEntriesSwappedAfterListing(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		out := s.Paths().Outputs
		sh(t, s, fmt.Sprintf(`cd %q && : > empty && printf aaaa > a && printf bbbb > b && printf cccc > c && printf dddd > d && printf eeee > e && printf ok > ok`, out))
		racer := &counted{Session: s.Session, before: map[string]string{
			agentwire.BuiltinOutputsFetch: fmt.Sprintf(`cd %q && rm empty && ln -s /etc/passwd empty && ln -f a b && rm c && mkdir c && printf DDDD > d && printf longer > e`, out),
		}}
		dest := t.TempDir()
		res := collect(t, racer, dest, transfer.CollectOptions{})
		assert.Equal(t, []string{"a", "ok"}, filePaths(res))
		assert.Equal(t, map[string]string{
			"empty": "replaced by a symbolic link after it was listed",
			"b":     "became a hard link after it was listed",
			"c":     "replaced by a directory after it was listed",
			"d":     "changed after it was listed: its sha256 differs",
			"e":     "changed after it was listed: 4 bytes listed, 6 fetched",
		}, refusedPaths(res))
		names, _ := os.ReadDir(dest)
		assert.Len(t, names, 2)

		sh(t, s, fmt.Sprintf(`cd %q && rm -rf ./* && printf x > gone && printf y > kept`, out))
		racer.before = map[string]string{agentwire.BuiltinOutputsFetch: fmt.Sprintf(`rm %q/gone`, out)}
		res = collect(t, racer, t.TempDir(), transfer.CollectOptions{})
		assert.Equal(t, []string{"kept"}, filePaths(res))
		assert.Equal(t, map[string]string{"gone": "vanished before it was fetched"}, refusedPaths(res))
	})
}

// A collection that fails part way — after several files were fetched —
// leaves dest exactly as it was.
func TestCollectFailureLeavesDestAsItWas(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p d && printf one > a.txt && printf two > d/b.txt && printf new > report.txt && head -c 200000 /dev/urandom > z.bin`, s.Paths().Outputs))
		dest := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dest, "report.txt"), []byte("host"), 0o644))
		require.NoError(t, os.Mkdir(filepath.Join(dest, "keep"), 0o755))
		before := snapshot(t, dest)
		truncated := &counted{Session: s.Session, rewrite: map[string]func([]byte) []byte{
			agentwire.BuiltinOutputsFetch: func(b []byte) []byte { return b[:len(b)-60000] }, // inside z.bin, the last file
		}}
		_, err := transfer.Collect(context.Background(), truncated, dest, transfer.CollectOptions{Overwrite: true})
		assert.ErrorIs(t, err, outputs.ErrUnsafeOutput)
		assert.Contains(t, err.Error(), `archive broken in "z.bin"`)
		assert.Equal(t, before, snapshot(t, dest))

		fresh := filepath.Join(t.TempDir(), "new", "dest")
		_, err = transfer.Collect(context.Background(), truncated, fresh, transfer.CollectOptions{})
		require.Error(t, err)
		assert.NoDirExists(t, filepath.Dir(fresh), "directories made for dest are removed again")
	})
}

// A guest that lies about its outputs gets nothing onto the host.
func TestCollectRefusesALyingGuest(t *testing.T) {
	sum := sha256.Sum256([]byte("hello"))
	good := hex.EncodeToString(sum[:])
	records := func(recs ...string) []byte { return []byte("0\x00" + strings.Join(recs, "\x00") + "\x00") }
	rec := func(path, size, sha string) string { return strings.Join([]string{path, "f", "1", size, sha}, "\x00") }
	cases := []struct {
		name    string
		listing []byte
		fails   bool // the listing as a whole, else the entry is refused
	}{
		{"parent escape", records(rec("../evil", "5", good)), false},
		{"absolute", records(rec("/etc/passwd", "5", good)), false},
		{"huge size", records(rec("a.txt", "99999999999999999999", good)), true},
		{"bad hex", records(rec("a.txt", "5", strings.Repeat("z", 64))), true},
		{"record count", []byte("0\x00a.txt\x00f\x005\x00"), true},
		{"size lies", records(rec("a.txt", "3", good)), false},
		{"digest lies", records(rec("a.txt", "5", strings.Repeat("a", 64))), false},
		{"not there", records(rec("b.txt", "5", good)), false},
	}
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`printf hello > %q/a.txt`, s.Paths().Outputs))
		for _, c := range cases {
			liar := &counted{Session: s.Session, rewrite: map[string]func([]byte) []byte{
				agentwire.BuiltinOutputsList: func([]byte) []byte { return c.listing },
			}}
			dest := t.TempDir()
			res, err := transfer.Collect(context.Background(), liar, dest, transfer.CollectOptions{})
			if c.fails {
				assert.Error(t, err, c.name)
			} else if assert.NoError(t, err, c.name) {
				assert.Empty(t, res.Files, c.name)
				assert.Len(t, res.Refused, 1, c.name)
			}
			entries, _ := os.ReadDir(dest)
			assert.Empty(t, entries, "%s: nothing written", c.name)
		}
		// The archive must hold the listed files and nothing else.
		liar := &counted{Session: s.Session, rewrite: map[string]func([]byte) []byte{
			agentwire.BuiltinOutputsFetch: func(b []byte) []byte { return bytes.Replace(b, []byte("hello"), []byte("HELLO"), 1) },
		}}
		dest := t.TempDir()
		res, err := transfer.Collect(context.Background(), liar, dest, transfer.CollectOptions{})
		require.NoError(t, err)
		assert.Equal(t, "changed after it was listed: its sha256 differs", res.Refused[0].Reason)
		entries, _ := os.ReadDir(dest)
		assert.Empty(t, entries)

		liar.rewrite[agentwire.BuiltinOutputsFetch] = func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("a.txt"), []byte("t.axt")) }
		_, err = transfer.Collect(context.Background(), liar, dest, transfer.CollectOptions{})
		assert.ErrorIs(t, err, outputs.ErrUnsafeOutput)
		assert.Contains(t, err.Error(), `archive holds "t.axt"`)
	})
}

func TestCollectRefusesABadAllowList(t *testing.T) {
	s := &counted{Session: nil}
	_, err := transfer.Collect(context.Background(), s, t.TempDir(), transfer.CollectOptions{Allow: []string{"../x"}})
	assert.ErrorIs(t, err, transfer.ErrPath)
	assert.Zero(t, s.n.Load())
}

// The contract's largest collection, 100 MiB, fits the deadlines Collect
// sets itself on msb (fakemsb, one exec per call); the time is logged for
// docs/cli.md. TestCollectOverChannelFitsItsDeadline covers the channel.
func TestCollect100MiBFitsItsDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 100 MiB")
	}
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "w", SessionID: "big", Image: "debian",
		NoChannel: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	sh(t, s, fmt.Sprintf(`cd %q && for i in 1 2 3; do head -c 26214400 /dev/urandom > f$i.bin; done && head -c 26000000 /dev/urandom > f4.bin`, s.Paths().Outputs))
	start := time.Now()
	res, err := transfer.Collect(context.Background(), s, t.TempDir(), transfer.CollectOptions{})
	require.NoError(t, err)
	t.Logf("collected %d files, 99.8 MiB, in %v", len(res.Files), time.Since(start))
	assert.Len(t, res.Files, 4)
	assert.False(t, res.Partial)
}

// Over the guest agent's channel the archive travels as base64 in JSON
// frames: 10 MiB of outputs fit the deadline Collect sets for them (3 minutes)
// even under the race detector, whose instrumentation of the frame codec
// makes it many times slower than a real run (100 MiB: about 4 s without
// it, 24 s with it; one exec per call: 2 s either way).
func TestCollectOverChannelFitsItsDeadline(t *testing.T) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "w", SessionID: "chan", Image: "debian",
		AgentFile: agenttest.AgentBinary(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	sh(t, s, fmt.Sprintf(`cd %q && for i in 1 2; do head -c 5242880 /dev/urandom > f$i.bin; done`, s.Paths().Outputs))
	require.Len(t, env.Channel(s.Name()).Msb, 1, "the calls go over the channel")
	start := time.Now()
	res, err := transfer.Collect(context.Background(), s, t.TempDir(), transfer.CollectOptions{})
	require.NoError(t, err)
	t.Logf("collected %d files, 10 MiB, in %v", len(res.Files), time.Since(start))
	assert.Len(t, res.Files, 2)
}

// A directory the agent made unreadable is refused by name; the rest of
// the outputs are still collected. (On the host session and fakemsb the
// collector runs as root, which reads anything.)
func TestCollectSurvivesAnUnreadableDirectory(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		if sh(t, s, "id -u") == "0\n" {
			t.Skip("the collector runs as root here")
		}
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p locked && echo secret > locked/s.txt && chmod 000 locked && echo ok > ok.txt`, s.Paths().Outputs))
		t.Cleanup(func() { sh(t, s, fmt.Sprintf(`chmod 755 %q/locked`, s.Paths().Outputs)) })
		res := collect(t, s, t.TempDir(), transfer.CollectOptions{})
		assert.Equal(t, []string{"ok.txt"}, filePaths(res))
		assert.Equal(t, map[string]string{"locked": "a directory that cannot be read; its contents were not listed"}, refusedPaths(res))
	})
}
