//go:build linux

package guestagent

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// builtinLs lists a directory for the ls tool (tools/ls.go): args
// directory, shown name. A missing path fails with "Path not found", one
// that is no directory with "Not a directory" (exit 3); else it prints
// what `find -H DIR -mindepth 1 -maxdepth 1 -ignore_readdir_race -printf '%Y %f\0'`
// prints (GNU findutils 4.9, the image's): one "TYPE NAME\0" record per
// entry in the directory's order, TYPE as find's %Y, an entry gone before
// its lstat left out, and find's messages and status for what it cannot
// read.
func builtinLs(c *builtinCall) int {
	if len(c.Args) != 2 {
		_, _ = fmt.Fprintf(c.Stderr, "ls: want 2 arguments (directory, shown name), got %d\n", len(c.Args))
		return 2
	}
	j := &fileJob{c: c, show: c.Args[1]}
	return asCallUser(c, func() int { return j.ls(c.Args[0]) })
}

func (j *fileJob) ls(d string) int {
	path := j.c.userPath(d) // d is what find's messages show
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return j.fail(3, "Path not found: "+j.show)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return j.fail(3, "Not a directory: "+j.show)
	}
	q := findQuoter(j.c.Env)
	status := 0
	complain := func(path string, err error) {
		_, _ = fmt.Fprintf(j.c.Stderr, "find: %s: %s\n", q.quote(path), errText(err))
		status = 1
	}
	fd, err := retryEINTR(func() (int, error) {
		// A link to a directory is listed as that directory (-H), as the
		// seed's `ls -1A PATH` lists it: the stat above followed it too.
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		complain(d, err)
		return status
	}
	defer unix.Close(fd)
	entries, err := readDirEntries(fd, j.c.Killed)
	if j.c.ending() {
		return killedExit
	}
	if err != nil {
		complain(d, err)
		return status
	}
	prefix := strings.TrimSuffix(d, "/") + "/"
	var out bytes.Buffer
	for _, e := range entries {
		name := e.name
		if j.c.ending() {
			return killedExit
		}
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err != unix.ENOENT { // gone since the read: -ignore_readdir_race
				complain(prefix+name, err)
			}
			continue
		}
		kind := fileTypeLetter(st.Mode)
		if kind == 'l' {
			switch err := unix.Fstatat(fd, name, &st, 0); err {
			case nil:
				kind = fileTypeLetter(st.Mode)
			case unix.ENOENT, unix.ENOTDIR:
				kind = 'N'
			case unix.ELOOP:
				kind = 'L'
			default:
				kind = '?'
				_, _ = fmt.Fprintf(j.c.Stderr, "find: %s: %s\n", q.quote(prefix+name), errText(err))
			}
		}
		out.WriteByte(kind)
		out.WriteByte(' ')
		out.WriteString(name)
		out.WriteByte(0)
	}
	if _, err := j.c.Stdout.Write(out.Bytes()); err != nil {
		return 1
	}
	return status
}

// dirEntry is one name of a directory with its type as getdents gave it
// (DT_UNKNOWN when the filesystem does not say).
type dirEntry struct {
	name string
	typ  uint8
}

// readDirEntries lists the directory fd's entries but "." and "..", in
// its own order; nothing once killed closes.
func readDirEntries(fd int, killed <-chan struct{}) ([]dirEntry, error) {
	var entries []dirEntry
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-killed:
			return nil, nil
		default:
		}
		n, err := retryEINTR(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return entries, err
		}
		if n <= 0 {
			return entries, nil
		}
		// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return entries, unix.EINVAL
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); binary.NativeEndian.Uint64(b[:8]) != 0 && s != "." && s != ".." {
				entries = append(entries, dirEntry{name: s, typ: b[18]})
			}
			b = b[reclen:]
		}
	}
}

// fileTypeLetter is find's letter for a file type (%y, %Y).
func fileTypeLetter(mode uint32) byte {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 'f'
	case unix.S_IFDIR:
		return 'd'
	case unix.S_IFLNK:
		return 'l'
	case unix.S_IFSOCK:
		return 's'
	case unix.S_IFBLK:
		return 'b'
	case unix.S_IFCHR:
		return 'c'
	case unix.S_IFIFO:
		return 'p'
	}
	return 'U'
}

// quoter quotes a file name in find's messages as gnulib's quotearg does
// in locale_quoting_style: ‘…’ where the locale's charset is UTF-8, '…'
// else, with C escapes for what the locale cannot print and a backslash
// before the closing quote and a backslash.
type quoter struct{ utf8 bool }

// findQuoter gives the quoting of a find started with env: a UTF-8 charset
// when the LC_CTYPE it would use (LC_ALL, LC_CTYPE, then LANG) names one.
// Only C.UTF-8 is sure to exist in the image; another UTF-8 locale counts
// as existing.
func findQuoter(env []string) quoter {
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	for _, k := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if v := vars[k]; v != "" {
			_, charset, _ := strings.Cut(strings.ToLower(v), ".")
			charset, _, _ = strings.Cut(charset, "@")
			return quoter{utf8: charset == "utf-8" || charset == "utf8"}
		}
	}
	return quoter{}
}

func (q quoter) quote(s string) string {
	left, right := "'", "'"
	if q.utf8 {
		left, right = "\u2018", "\u2019"
	}
	var b strings.Builder
	b.WriteString(left)
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], right) {
			b.WriteString(`\` + right)
			i += len(right)
			continue
		}
		c := s[i]
		switch c {
		case '\a', '\b', '\f', '\n', '\r', '\t', '\v':
			b.WriteString(`\` + string("abfnrtv"[strings.IndexByte("\a\b\f\n\r\t\v", c)]))
			i++
			continue
		case '\\':
			b.WriteString(`\\`)
			i++
			continue
		}
		if c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
			i++
			continue
		}
		if q.utf8 {
			if r, n := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError && n > 1 && printableRune(r) {
				b.WriteString(s[i : i+n])
				i += n
				continue
			}
		}
		fmt.Fprintf(&b, `\%03o`, c)
		i++
	}
	b.WriteString(right)
	return b.String()
}

// printableRune approximates glibc's iswprint in C.UTF-8: assigned and not
// a control. (A code point assigned after the image's glibc's Unicode
// version still differs.)
func printableRune(r rune) bool {
	return r >= 0xa0 && !(r >= 0x2028 && r <= 0x2029) && !unicode.Is(unicode.Cn, r)
}
