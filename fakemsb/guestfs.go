//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// guestRoot opens paths inside a sandbox's mount namespace through
// /proc/PID/root. Every lookup is confined to the guest's root
// (RESOLVE_IN_ROOT): a guest symlink to "/etc" means the guest's /etc, and
// magic links (/proc/N/root, /proc/N/fd/M) are refused, so a guest can never
// make fakemsb touch a host path.
type guestRoot struct{ fd int }

func openGuestRoot(pid int) (*guestRoot, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &guestRoot{fd: fd}, nil
}

func (r *guestRoot) close() { unix.Close(r.fd) }

const confined = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openat2 opens p relative to dirfd with resolve flags, retrying EINTR and
// the EAGAIN that openat2 returns when a concurrent rename raced it.
func openat2(dirfd int, p string, flags int, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(dirfd, p, &how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

func (r *guestRoot) open(p string, flags int, mode uint32) (int, error) {
	return openat2(r.fd, p, flags, mode, confined)
}

func (r *guestRoot) readFile(p string) ([]byte, error) {
	fd, err := r.open(p, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return io.ReadAll(f)
}

func (r *guestRoot) isDir(p string) bool {
	fd, err := r.open(p, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// executable reports whether p is a regular file that uid/gid may execute
// on a mount that allows execution: 0 if so, else the errno execve would
// give.
func (r *guestRoot) executable(p string, uid, gid int) unix.Errno {
	fd, err := r.open(p, unix.O_PATH, 0)
	if err != nil {
		if e, ok := err.(unix.Errno); ok && e != unix.ENOENT && e != unix.ENOTDIR {
			return unix.EACCES
		}
		return unix.ENOENT
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return unix.EACCES
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err == nil && fs.Flags&unix.ST_NOEXEC != 0 {
		return unix.EACCES
	}
	var bit uint32
	switch {
	case uid == 0:
		bit = 0o111
	case int(st.Uid) == uid:
		bit = 0o100
	case int(st.Gid) == gid:
		bit = 0o010
	default:
		bit = 0o001
	}
	if st.Mode&bit == 0 {
		return unix.EACCES
	}
	return 0
}

// lookPath resolves argv0 like execvp in the guest: 0 and the path, or the
// errno that exec would fail with.
func (r *guestRoot) lookPath(argv0, pathEnv, wd string, uid, gid int) unix.Errno {
	if strings.Contains(argv0, "/") {
		p := argv0
		if !path.IsAbs(p) {
			p = path.Join(wd, p)
		}
		return r.executable(p, uid, gid)
	}
	res := unix.ENOENT
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = wd
		} else if !path.IsAbs(dir) {
			dir = path.Join(wd, dir)
		}
		switch r.executable(path.Join(dir, argv0), uid, gid) {
		case 0:
			return 0
		case unix.EACCES:
			res = unix.EACCES
		}
	}
	return res
}

// lookupUser resolves --user: "uid[:gid]" or "name[:group]" against the
// guest's /etc/passwd and /etc/group.
func (r *guestRoot) lookupUser(spec string) (uid, gid int, err error) {
	u, g, hasGroup := strings.Cut(spec, ":")
	uid, gid = -1, -1
	if n, err := strconv.Atoi(u); err == nil && n >= 0 {
		uid = n
	}
	passwd, _ := r.readFile("/etc/passwd")
	for _, line := range strings.Split(string(passwd), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		if f[0] == u || (uid >= 0 && f[2] == strconv.Itoa(uid)) {
			uid, _ = strconv.Atoi(f[2])
			gid, _ = strconv.Atoi(f[3])
			break
		}
	}
	if uid < 0 {
		return 0, 0, fmt.Errorf("user not found: %s", u)
	}
	if gid < 0 {
		gid = uid
	}
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil && n >= 0 {
			return uid, n, nil
		}
		group, _ := r.readFile("/etc/group")
		for _, line := range strings.Split(string(group), "\n") {
			if f := strings.Split(line, ":"); len(f) >= 3 && f[0] == g {
				n, _ := strconv.Atoi(f[2])
				return uid, n, nil
			}
		}
		return 0, 0, fmt.Errorf("group not found: %s", g)
	}
	return uid, gid, nil
}
