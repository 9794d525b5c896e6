package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/outputs"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// counted wraps a Session and counts its Shell and CopyIn calls.
type counted struct {
	session.Session
	n atomic.Int64
	// rewrite, when set, replaces the stdout of Shell calls whose script
	// contains the key: a guest that lies.
	rewrite map[string]func([]byte) []byte
}

func (c *counted) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	c.n.Add(1)
	for key, fn := range c.rewrite {
		if strings.Contains(cmd.Script, key) {
			res, err := c.Session.Shell(ctx, cmd, session.ShellOptions{Stdin: o.Stdin, User: o.User, MaxOutput: o.MaxOutput})
			if err != nil {
				return res, err
			}
			res.Stdout = fn(res.Stdout)
			if o.Stdout != nil {
				o.Stdout(res.Stdout)
				res.Stdout = nil
			}
			return res, nil
		}
	}
	return c.Session.Shell(ctx, cmd, o)
}

func backends(t *testing.T, fn func(t *testing.T, s *counted)) {
	t.Run("host", func(t *testing.T) { fn(t, &counted{Session: sessiontest.NewHost(t)}) })
	t.Run("msb", func(t *testing.T) {
		env := fakemsbtest.New(t)
		s, err := session.Create(context.Background(), session.Options{
			Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "w", SessionID: "s", Image: "debian",
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
		fn(t, &counted{Session: s})
	})
}

func mount(kind transfer.Kind, path, content string) transfer.Mount {
	sum := sha256.Sum256([]byte(content))
	return transfer.Mount{Kind: kind, Path: path, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), Content: strings.NewReader(content)}
}

func sh(t *testing.T, s session.Session, script string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script}, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	return string(res.Stdout)
}

func TestMaterialize(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		mounts := []transfer.Mount{
			mount(transfer.Upload, p.Uploads+"/data/a.csv", "a,b\n1,2\n"),
			mount(transfer.Upload, p.Uploads+"/top.txt", "top"),
			mount(transfer.Skill, p.Skills+"/pdf/SKILL.md", "# pdf"),
			mount(transfer.Skill, p.Skills+"/pdf/scripts/run.sh", "#!/bin/sh\necho ran\n"),
		}
		for i := 0; i < 40; i++ {
			mounts = append(mounts, mount(transfer.Upload, fmt.Sprintf("%s/many/f%02d", p.Uploads, i), fmt.Sprint(i)))
		}
		require.NoError(t, transfer.Materialize(context.Background(), s, mounts))
		assert.EqualValues(t, 1, s.n.Load(), "all files in one guest command")

		out := sh(t, s, fmt.Sprintf(`cd %q && stat -c '%%a %%n' data data/a.csv top.txt many/f07 && cd %q && stat -c '%%a %%n' pdf pdf/SKILL.md pdf/scripts pdf/scripts/run.sh && cat %q/data/a.csv`, p.Uploads, p.Skills, p.Uploads))
		assert.Equal(t, "755 data\n444 data/a.csv\n444 top.txt\n444 many/f07\n755 pdf\n444 pdf/SKILL.md\n755 pdf/scripts\n555 pdf/scripts/run.sh\na,b\n1,2\n", out)
	})
}

func TestMaterializeRefusesBeforeAnyGuestCall(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		p := s.Paths()
		bad := func(m transfer.Mount, f func(*transfer.Mount)) transfer.Mount { f(&m); return m }
		cases := []struct {
			name string
			m    transfer.Mount
			want error
		}{
			{"digest mismatch", bad(mount(transfer.Upload, p.Uploads+"/x", "payload"), func(m *transfer.Mount) { m.SHA256 = strings.Repeat("0", 64) }), transfer.ErrIntegrity},
			{"short content", bad(mount(transfer.Upload, p.Uploads+"/x", "payload"), func(m *transfer.Mount) { m.Size = 100 }), transfer.ErrIntegrity},
			{"long content", bad(mount(transfer.Upload, p.Uploads+"/x", "payload"), func(m *transfer.Mount) { m.Size = 3 }), transfer.ErrIntegrity},
			{"escape", mount(transfer.Upload, p.Uploads+"/../etc/passwd", "x"), transfer.ErrPath},
			{"prefix trick", mount(transfer.Upload, p.Uploads+"-escape/x", "x"), transfer.ErrPath},
			{"the root itself", mount(transfer.Upload, p.Uploads, "x"), transfer.ErrPath},
			{"relative", mount(transfer.Upload, "x.txt", "x"), transfer.ErrPath},
			{"skill outside skills", mount(transfer.Skill, p.Uploads+"/x", "x"), transfer.ErrPath},
			{"unknown kind", mount("other", p.Uploads+"/x", "x"), transfer.ErrPath},
			{"twice", mount(transfer.Upload, p.Uploads+"/ok.txt", "ok"), transfer.ErrPath},
		}
		for _, c := range cases {
			good := mount(transfer.Upload, p.Uploads+"/ok.txt", "ok")
			err := transfer.Materialize(context.Background(), s, []transfer.Mount{good, c.m})
			assert.ErrorIs(t, err, c.want, c.name)
		}
		assert.EqualValues(t, 0, s.n.Load(), "nothing reaches the guest")
		assert.Equal(t, "", sh(t, s, "ls -A "+p.Uploads), "nothing was written")
	})
}

func TestCollect(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		out := s.Paths().Outputs
		sh(t, s, fmt.Sprintf(`cd %q && mkdir -p r/d && printf hello > r/a.txt && head -c 300000 /dev/urandom > r/d/b.bin && printf '{}' > c.json && ln -s /etc/passwd link`, out))
		dest := t.TempDir()
		s.n.Store(0)
		files, err := transfer.Collect(context.Background(), s, dest, outputs.Limits{})
		require.NoError(t, err)
		assert.EqualValues(t, 2, s.n.Load(), "a listing and one fetch")
		require.Len(t, files, 3, "the symlink is not collected")
		byPath := map[string]transfer.File{}
		for _, f := range files {
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

		empty, err := transfer.Collect(context.Background(), &counted{Session: s.Session}, t.TempDir(), outputs.Limits{MaxFiles: 10})
		require.NoError(t, err)
		assert.Len(t, empty, 3)
	})
}

func TestCollectQuota(t *testing.T) {
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`cd %q && for i in $(seq 1 5); do echo $i > f$i; done`, s.Paths().Outputs))
		_, err := transfer.Collect(context.Background(), s, t.TempDir(), outputs.Limits{MaxFiles: 4})
		assert.ErrorIs(t, err, outputs.ErrQuota)
		assert.Contains(t, err.Error(), "4")
	})
}

// A guest that lies about its outputs is refused and nothing lands on the host.
func TestCollectRefusesALyingGuest(t *testing.T) {
	const listingKey = "max_files" // a word only the listing script uses
	records := func(fields ...string) []byte { return []byte(strings.Join(fields, "\x00") + "\x00") }
	sum := sha256.Sum256([]byte("hello"))
	good := hex.EncodeToString(sum[:])
	cases := []struct {
		name    string
		listing []byte
	}{
		{"parent escape", records("../evil", "5", good)},
		{"absolute", records("/etc/passwd", "5", good)},
		{"huge size", records("a.txt", "99999999999999999999", good)},
		{"bad hex", records("a.txt", "5", strings.Repeat("z", 64))},
		{"record count", []byte("a.txt\x005\x00")},
		{"size lies", records("a.txt", "3", good)},
		{"digest lies", records("a.txt", "5", strings.Repeat("a", 64))},
	}
	backends(t, func(t *testing.T, s *counted) {
		sh(t, s, fmt.Sprintf(`printf hello > %q/a.txt`, s.Paths().Outputs))
		script, _ := outputs.ListingScript("/x", outputs.Limits{})
		require.Contains(t, script, listingKey)
		for _, c := range cases {
			liar := &counted{Session: s.Session, rewrite: map[string]func([]byte) []byte{
				listingKey: func([]byte) []byte { return c.listing },
			}}
			dest := t.TempDir()
			_, err := transfer.Collect(context.Background(), liar, dest, outputs.Limits{})
			require.Error(t, err, c.name)
			entries, _ := os.ReadDir(dest)
			assert.Empty(t, entries, "%s: nothing written", c.name)
		}
		// The archive must hold exactly the listed files.
		liar := &counted{Session: s.Session, rewrite: map[string]func([]byte) []byte{
			"tar -c": func(b []byte) []byte { return bytes.Replace(b, []byte("hello"), []byte("HELLO"), 1) },
		}}
		dest := t.TempDir()
		_, err := transfer.Collect(context.Background(), liar, dest, outputs.Limits{})
		assert.ErrorIs(t, err, outputs.ErrChecksum)
		entries, _ := os.ReadDir(dest)
		assert.Empty(t, entries)
	})
}
