//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// builtinRead is the read tool's guest side (tools/read.go runRead): args
// path, first line, lines, bytes, shown name, end mark.
// It prints "T LINES FIRSTLEN\n", at most that many lines and bytes+1
// bytes from the first line on, then the end mark; or, for a file with a
// NUL in its first 8 KiB, "B SIZE\n", its first 512 bytes and the mark.
func builtinRead(c *builtinCall) int {
	if len(c.Args) != 6 {
		_, _ = fmt.Fprintf(c.Stderr, "read: want 6 arguments (path, first line, lines, bytes, shown name, end mark), got %d\n", len(c.Args))
		return 2
	}
	var nums [3]int64
	for i, a := range c.Args[1:4] {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			_, _ = fmt.Fprintf(c.Stderr, "read: bad number %q\n", a)
			return 2
		}
		nums[i] = n
	}
	j := &fileJob{c: c, show: c.Args[4]}
	return asCallUser(c, func() int { return j.read(c.userPath(c.Args[0]), nums[0], nums[1], nums[2], c.Args[5]) })
}

func (j *fileJob) read(f string, start, take, maxb int64, end string) int {
	var st unix.Stat_t
	switch {
	case unix.Stat(f, &st) != nil:
		return j.fail(3, "File not found: "+j.show)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return j.fail(3, "Path is a directory: "+j.show)
	case !readable(f):
		return j.fail(3, "Permission denied: "+j.show)
	}
	// Nonblocking: a FIFO's open must not wait for a writer in the agent.
	// readSome waits for one, until the call is killed.
	fd, err := openRead(f)
	// EAGAIN: another's write lease on it is being broken, which a
	// blocking open would wait for; this open asks again until then.
	for err == unix.EAGAIN {
		select {
		case <-j.c.Killed:
			return killedExit
		case <-time.After(10 * time.Millisecond):
		}
		fd, err = openRead(f)
	}
	switch {
	case err == unix.ELOOP:
		// A magic link refused (openRead): its stat found no loop.
		return j.fail(3, "Permission denied: "+j.show)
	case err != nil:
		return 4
	}
	defer unix.Close(fd)
	wait := !isRegularFD(fd)
	var head, body []byte
	var lines, firstLen int64
	nl, ln := int64(0), int64(1)
	firstDone, bodyDone := false, false
	limit := min(maxb, math.MaxInt64-1) + 1 // must not wrap negative
	buf := make([]byte, ioChunk)
	for {
		n, code := j.readSome(fd, buf, wait)
		if code != 0 {
			return code
		}
		if n == 0 {
			break
		}
		chunk := buf[:n]
		if len(head) < 8192 {
			head = append(head, chunk[:min(n, 8192-len(head))]...)
			if bytes.IndexByte(head, 0) >= 0 {
				if unix.Fstat(fd, &st) != nil {
					return 4
				}
				out := fmt.Appendf(nil, "B %d\n", st.Size)
				out = append(out, head[:min(len(head), 512)]...)
				return j.print(append(out, end...))
			}
		}
		nl += int64(bytes.Count(chunk, []byte{'\n'}))
		pos := 0
		for ln < start {
			i := bytes.IndexByte(chunk[pos:], '\n')
			if i < 0 {
				break
			}
			pos += i + 1
			ln++
		}
		if ln < start {
			continue
		}
		if !firstDone {
			if i := bytes.IndexByte(chunk[pos:], '\n'); i < 0 {
				firstLen += int64(n - pos)
			} else {
				firstLen += int64(i)
				firstDone = true
			}
		}
		for !bodyDone && int64(len(body)) < limit {
			i := bytes.IndexByte(chunk[pos:], '\n')
			if i < 0 {
				body = append(body, chunk[pos:]...)
				break
			}
			body = append(body, chunk[pos:pos+i+1]...)
			pos += i + 1
			lines++
			bodyDone = lines >= take
		}
		if int64(len(body)) >= limit {
			body, bodyDone = body[:limit], true
		}
	}
	out := fmt.Appendf(nil, "T %d %d\n", nl+1, firstLen)
	out = append(append(out, body...), end...)
	return j.print(out)
}

// readSome reads from fd. One that is no regular file (a FIFO, a device),
// opened nonblocking, is first waited on until it has input or its last
// writer left, as a blocking open and reads would wait, but only until
// the call is killed: a FIFO no writer ever opens reads as nothing.
func (j *fileJob) readSome(fd int, buf []byte, wait bool) (int, int) {
	for {
		if j.c.ending() {
			return 0, killedExit
		}
		if wait {
			ready, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 50)
			if ready <= 0 {
				continue
			}
		}
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf) })
		if err == nil {
			return n, 0
		}
		if err != unix.EAGAIN {
			return 0, 4
		}
	}
}

func (j *fileJob) print(out []byte) int {
	if _, err := j.c.Stdout.Write(out); err != nil {
		return 1
	}
	return 0
}

// readable is test -r as the user: faccessat with the thread's effective
// (here filesystem) identity, as access(2) would check the user's process.
func readable(path string) bool {
	err := unix.Faccessat2(unix.AT_FDCWD, path, unix.R_OK, unix.AT_EACCESS)
	if err != unix.ENOSYS {
		return err == nil
	}
	fd, err := openRead(path) // a kernel before 5.8: try the open itself
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
