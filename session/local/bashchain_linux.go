package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// The chain's file is read and rewritten in place under its lock (flock),
// never created again nor renamed: on a disk, where a rename or a new file
// costs the journal a good part of a millisecond, a call pays a few
// system calls on a file in the page cache. The lock is only tried: a
// process that finds it held (another at the same moment, or one stopped
// in it) goes without the chain, and its call starts its own bash.

// Take returns the id that waits and marks it taken, in one hold of the
// lock: of two processes taking at once, one has it.
func (c BashChain) Take() (next string, before bool) {
	f, err := c.lock(false)
	if err != nil {
		return "", !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	id := make([]byte, bashproto.IDLen)
	if n, _ := f.ReadAt(id, 0); n < bashproto.IDLen || !bashproto.IsID(string(id)) {
		return "", true
	}
	if _, err := f.WriteAt([]byte(noneWaiting), 0); err != nil {
		// Not marked taken, so not taken: another would take it too.
		return "", true
	}
	return string(id), true
}

// Leave writes next over an id that waits, whose bash then lingers until
// the agent ends it; "" only marks that a call came, leaving an id that
// waits where it is. A chain that cannot be written costs the next call
// its head start, nothing more, so failures are not reported. Anything
// else than an id or "" is ignored: written over an id, its bytes would
// splice a new one that no call named.
func (c BashChain) Leave(next string) {
	if next != "" && !bashproto.IsID(next) {
		return
	}
	f, err := c.lock(true)
	if err != nil {
		return
	}
	defer f.Close()
	if next == "" {
		if st, err := f.Stat(); err != nil || st.Size() >= bashproto.IDLen {
			return
		}
		next = noneWaiting
	}
	_, _ = f.WriteAt([]byte(next), 0)
}

// lock opens the chain's file (making it when create) and tries its lock,
// which closing the file releases.
func (c BashChain) lock(create bool) (*os.File, error) {
	flags := os.O_RDWR | unix.O_NOFOLLOW
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(filepath.Join(c.dir, bashNextFile), flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
