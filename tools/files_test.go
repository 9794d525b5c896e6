package tools_test

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// write and edit go through a symbolic link to its target when the target is
// inside the workspace, and refuse one that leads out of it.
func TestWriteAndEditThroughSymlinks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `printf 'old\n' > t.txt && ln -s t.txt l.txt && mkdir d && ln -s ../t.txt d/up.txt &&
			ln -s missing.txt dangling.txt && ln -s /etc/hostname out.txt && ln -s /tmp outdir`)

		assert.Equal(t, "Successfully wrote 4 bytes to l.txt", mustCall(t, tb, "write", obj{"path": "l.txt", "content": "new\n"}))
		assert.Equal(t, "new\n", sh(t, s, `cat t.txt`))
		mustCall(t, tb, "edit", obj{"path": "d/up.txt", "oldText": "new", "newText": "newer"})
		assert.Equal(t, "newer\n", sh(t, s, `cat t.txt`))
		mustCall(t, tb, "write", obj{"path": "dangling.txt", "content": "made"})
		assert.Equal(t, "made", sh(t, s, `cat missing.txt`))
		assert.Equal(t, "links kept\n", sh(t, s, `[ -L l.txt ] && [ -L d/up.txt ] && [ -L dangling.txt ] && echo links kept`))

		hostname := sh(t, s, `cat /etc/hostname`)
		for _, in := range []obj{
			{"tool": "write", "path": "out.txt", "content": "x"},
			{"tool": "edit", "path": "out.txt", "oldText": "a", "newText": "b"},
			{"tool": "write", "path": "outdir/x.txt", "content": "x"},
		} {
			name := in["tool"].(string)
			delete(in, "tool")
			_, err := call(t, tb, name, in)
			require.Error(t, err, in)
			assert.Contains(t, err.Error(), "outside "+s.Paths().Workspace, in)
			assert.True(t, tools.IsGuestError(err), in)
		}
		assert.Equal(t, hostname, sh(t, s, `cat /etc/hostname`))
		assert.Equal(t, "absent\n", sh(t, s, `[ -L out.txt ] && [ ! -e /tmp/x.txt ] && echo absent`))
	})
}

// A file with CRLF line ends is edited on LF-normalised text and keeps CRLF;
// a byte order mark stays; a file with mixed line ends is left as it is.
func TestEditLineEndingsAndBOM(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		mustCall(t, tb, "write", obj{"path": "crlf.txt", "content": "a\r\nb\r\nc\r\n"})
		mustCall(t, tb, "edit", obj{"path": "crlf.txt", "oldText": "a\nb", "newText": "x\ny"})
		assert.Equal(t, "x\r\ny\r\nc\r\n", sh(t, s, `cat crlf.txt`))
		mustCall(t, tb, "edit", obj{"path": "crlf.txt", "oldText": "y\r\nc", "newText": "z"})
		assert.Equal(t, "x\r\nz\r\n", sh(t, s, `cat crlf.txt`))

		mustCall(t, tb, "write", obj{"path": "bom.txt", "content": "\ufeffone\r\ntwo\r\n"})
		mustCall(t, tb, "edit", obj{"path": "bom.txt", "oldText": "one\ntwo", "newText": "1\n2"})
		assert.Equal(t, "\ufeff1\r\n2\r\n", sh(t, s, `cat bom.txt`))

		mustCall(t, tb, "write", obj{"path": "mixed.txt", "content": "a\r\nb\nc\n"})
		mustCall(t, tb, "edit", obj{"path": "mixed.txt", "oldText": "b\nc", "newText": "B\nC"})
		assert.Equal(t, "a\r\nB\nC\n", sh(t, s, `cat mixed.txt`))
	})
}

func TestEditWithoutChangeIsAnError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		mustCall(t, tb, "write", obj{"path": "same.txt", "content": "keep\n"})
		sh(t, s, `touch -d 2001-01-01 same.txt`)
		_, err := call(t, tb, "edit", obj{"path": "same.txt", "oldText": "keep", "newText": "keep"})
		assert.EqualError(t, err, "No changes made to same.txt. The replacement produced identical content.")
		assert.ErrorIs(t, err, tools.ErrInvalidInput)
		assert.Equal(t, "2001\n", sh(t, s, `date -r same.txt +%Y`), "the file was not rewritten")
	})
}

// Edit failures decided on the host are typed, as the guest's are.
func TestEditErrorsAreTyped(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		mustCall(t, tb, "write", obj{"path": "a.txt", "content": "alpha\n"})
		_, err := call(t, tb, "edit", obj{"path": "a.txt", "oldText": "omega", "newText": "beta"})
		var editErr *tools.EditError
		assert.True(t, errors.As(err, &editErr), "%v", err)
		assert.ErrorIs(t, err, tools.ErrInvalidInput)
		_, err = call(t, tb, "edit", obj{"path": "none.txt", "oldText": "a", "newText": "b"})
		assert.True(t, tools.IsGuestError(err), "%v", err)
	})
}

func TestWriteOntoDirectory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `mkdir -p dir/sub && ln -s dir dirlink`)
		for _, p := range []string{"dir", "dir/sub", "dirlink"} {
			_, err := call(t, tb, "write", obj{"path": p, "content": "x"})
			assert.EqualError(t, err, "Path is a directory: "+p)
		}
		assert.Equal(t, "sub\n", sh(t, s, `ls -A dir`), "nothing was left in the directory")
	})
}

// A name over 255 bytes or a path over 4095 is refused before anything runs,
// with a short message, and leaves no directory behind.
func TestWriteNameLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		before := calls()
		_, err := call(t, tb, "write", obj{"path": "deep/" + strings.Repeat("n", 300), "content": "x"})
		assert.EqualError(t, err, "write: file name too long (300 bytes; the limit is 255)")
		long := strings.Repeat(strings.Repeat("d", 200)+"/", 25) + "f.txt"
		_, err = call(t, tb, "write", obj{"path": long, "content": "x"})
		require.Error(t, err)
		assert.ErrorIs(t, err, tools.ErrInvalidInput)
		assert.Less(t, len(err.Error()), 120)
		assert.Equal(t, 0, calls()-before, "refused before any round trip")
		assert.Equal(t, "", sh(t, s, `ls -A`))
	})
}

// write keeps an existing file's mode (a script stays executable), and so
// does edit; a new file gets 644.
func TestWriteKeepsMode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `printf '#!/bin/sh\necho hi\n' > run.sh && chmod 750 run.sh`)
		mustCall(t, tb, "write", obj{"path": "run.sh", "content": "#!/bin/sh\necho hello\n"})
		assert.Equal(t, "750\n", sh(t, s, `stat -c %a run.sh`))
		mustCall(t, tb, "edit", obj{"path": "run.sh", "oldText": "hello", "newText": "bye"})
		assert.Equal(t, "750\n", sh(t, s, `stat -c %a run.sh`))
		mustCall(t, tb, "write", obj{"path": "new.txt", "content": "x"})
		assert.Equal(t, "644\n", sh(t, s, `stat -c %a new.txt`))
	})
}

// A reader never sees half a file while writes replace it.
func TestWriteIsAtomicForReaders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		content := func(lines int) string {
			return strings.Repeat(strings.Repeat("x", 63)+"\n", lines)
		}
		mustCall(t, tb, "write", obj{"path": "big.txt", "content": content(6000)})
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			for i := range 12 {
				_, err := call(t, tb, "write", obj{"path": "big.txt", "content": content(6000 - 1000*(i%2))})
				assert.NoError(t, err)
			}
		}()
		more := regexp.MustCompile(`\[(\d+) more lines in file`)
		reads := 0
		for stop := false; !stop; reads++ {
			select {
			case <-done:
				stop = true
			default:
			}
			out, err := call(t, tb, "read", obj{"path": "big.txt", "limit": 1})
			m := more.FindStringSubmatch(out)
			if err != nil || m == nil {
				t.Errorf("read %d saw a partial file: %q (%v)", reads, out, err)
				break
			}
			n, _ := strconv.Atoi(m[1])
			// 6000 or 5000 lines, plus the empty line after the last newline.
			assert.Contains(t, []int{6000, 5000}, n, "read %d saw %d more lines", reads, n)
		}
		wg.Wait()
		assert.Positive(t, reads)
		assert.Equal(t, "", sh(t, s, `find . -name '.oma-write.*'`), "no temp file left")
	})
}

// Parallel edits of one file through one Toolbox are serialized: every one
// lands.
func TestParallelEditsOfOneFileAllLand(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		const n = 8
		var content strings.Builder
		for i := range n {
			fmt.Fprintf(&content, "token-%d\n", i)
		}
		mustCall(t, tb, "write", obj{"path": "race.txt", "content": content.String()})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := call(t, tb, "edit", obj{"path": "race.txt", "oldText": fmt.Sprintf("token-%d\n", i), "newText": fmt.Sprintf("DONE-%d\n", i)})
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		final := mustCall(t, tb, "read", obj{"path": "race.txt"})
		for i := range n {
			assert.Contains(t, final, fmt.Sprintf("DONE-%d\n", i))
		}
	})
}

// A write that fails in the guest, after it made directories and its
// temporary file, removes them and keeps the directories that were there.
// Here the writes are edits whose files vanished, with their directories,
// after the toolbox wrote them: the guest makes the directories again,
// then finds no file holding the bytes the edit saw.
func TestFailedWriteLeavesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		sh(t, s, `mkdir -p keep/old && touch keep/old/f`)
		tb := tools.New(s, tools.Options{})
		for _, p := range []string{"deep/a/b/c.txt", "keep/new/er/c.txt", "keep/old/g.txt"} {
			mustCall(t, tb, "write", obj{"path": p, "content": "x"})
		}
		sh(t, s, `rm -r deep keep/new keep/old/g.txt`)
		for _, p := range []string{"deep/a/b/c.txt", "keep/new/er/c.txt", "keep/old/g.txt"} {
			_, err := call(t, tb, "edit", obj{"path": p, "oldText": "x", "newText": "y"})
			assert.EqualError(t, err, "Could not edit file: "+p+". File not found: "+p)
		}
		assert.Equal(t, "./keep\n./keep/old\n./keep/old/f\n", sh(t, s, `find . -mindepth 1 | sort`))
	})
}

// A write whose parent is a file, or whose path loops through symbolic
// links, fails with the reason and leaves the workspace as it was.
func TestWriteUnderFileOrLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `printf 'kept\n' > f.txt && ln -s loop loop`)
		_, err := call(t, tb, "write", obj{"path": "f.txt/x.txt", "content": "x"})
		assert.EqualError(t, err, "Cannot create the directory of f.txt/x.txt: File exists")
		_, err = call(t, tb, "write", obj{"path": "loop/x.txt", "content": "x"})
		assert.EqualError(t, err, "Cannot create the directory of loop/x.txt: Too many levels of symbolic links")
		assert.Equal(t, "./f.txt\n./loop\n", sh(t, s, `find . -mindepth 1 | sort`))
		assert.Equal(t, "kept\n", sh(t, s, `cat f.txt`))
	})
}

// An edit of a file as this toolbox last wrote it takes one round trip; a
// change made since by anything else is read first and kept, and an edit
// that no longer fits the file, or of a file that is gone, fails as usual.
func TestEditAfterWriteSkipsTheRead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		mustCall(t, tb, "write", obj{"path": "w.txt", "content": "x1\ny\n"})
		before := calls()
		mustCall(t, tb, "edit", obj{"path": "w.txt", "oldText": "x1", "newText": "x2"})
		mustCall(t, tb, "edit", obj{"path": "w.txt", "oldText": "x2", "newText": "x3"})
		assert.Equal(t, 2, calls()-before, "one round trip each")
		assert.Equal(t, "x3\ny\n", sh(t, s, `cat w.txt`))

		sh(t, s, `printf 'x3\nz\n' > w.txt`)
		mustCall(t, tb, "edit", obj{"path": "w.txt", "oldText": "x3", "newText": "x4"})
		assert.Equal(t, "x4\nz\n", sh(t, s, `cat w.txt`), "the change made outside the toolbox is kept")

		sh(t, s, `printf 'q\n' > w.txt`)
		_, err := call(t, tb, "edit", obj{"path": "w.txt", "oldText": "x4", "newText": "x5"})
		assert.EqualError(t, err, "Could not edit file: w.txt. Edit 1: oldText was not found. It must match the file exactly, including whitespace and newlines.")
		before = calls()
		mustCall(t, tb, "edit", obj{"path": "w.txt", "oldText": "q", "newText": "r"})
		assert.Equal(t, 1, calls()-before, "the failed edit's read serves its retry")

		sh(t, s, `rm w.txt`)
		_, err = call(t, tb, "edit", obj{"path": "w.txt", "oldText": "r", "newText": "s"})
		assert.EqualError(t, err, "Could not edit file: w.txt. File not found: w.txt")
		assert.Equal(t, "", sh(t, s, `find . -mindepth 1`), "nothing left behind")
	})
}
