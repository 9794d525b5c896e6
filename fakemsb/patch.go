//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// copyFile is one create --copy-file SRC:DST. msb copies SRC into the guest
// rootfs before boot, with SRC's permission bits; fakemsb keeps its own copy
// in patchDir (the guest never sees the host file, and later changes to it
// do not reach the guest) and copies it to DST in the holder's root.
type copyFile struct {
	Src  string      `json:"src"`
	Dst  string      `json:"dst"`
	Mode os.FileMode `json:"mode"`
	data []byte
}

// parseCopyFile checks a --copy-file spec as msb 0.6.18 does, in its order
// and with its messages, and reads the source.
func parseCopyFile(spec string) (*copyFile, error) {
	i := strings.Index(spec, ":/")
	if i < 0 {
		return nil, failf("--copy-file must be in format source:/guest[:options]")
	}
	src, dst := spec[:i], spec[i+1:]
	if src == "" {
		return nil, failf("--copy-file source path cannot be empty")
	}
	fi, err := os.Stat(src)
	if err != nil {
		return nil, failf("--copy-file: stat %s: %s", src, rustIOError(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, failf("--copy-file: %s is not a file", src)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, failf("--copy-file: read %s: %s", src, rustIOError(err))
	}
	return &copyFile{Src: src, Dst: dst, Mode: fi.Mode().Perm(), data: data}, nil
}

// rustIOError renders err as Rust's io::Error does: strerror's text and
// "(os error N)".
func rustIOError(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	msg := errno.Error()
	if msg != "" {
		msg = strings.ToUpper(msg[:1]) + msg[1:]
	}
	return fmt.Sprintf("%s (os error %d)", msg, int(errno))
}

// checkCopyDst refuses what fakemsb cannot place as msb would: msb never
// replaces a file of the image (replace is false), and fakemsb's guest root
// shares these directories with the host.
func checkCopyDst(dst string) error {
	if !imageDir(filepath.Clean(dst)) || filepath.Clean(dst) != dst {
		return failf("--copy-file: cannot place %s: the image has it (fakemsb shares /usr, /etc, /bin, /lib, /lib64, /sbin, /proc and /dev with the host)", dst)
	}
	return nil
}

func (a *app) patchDir(name string) string { return filepath.Join(a.home, "patches", name) }

// rootFilePrefix names the patch files of a sandbox's RootFiles.
const rootFilePrefix = "r"

// savePatches writes sb's copies and root files, root-only, into its
// patch directory.
func (a *app) savePatches(sb *sandbox) error {
	dir := a.patchDir(sb.Name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := a.saveFiles(dir, "", sb.CopyFiles); err != nil {
		return err
	}
	return a.saveFiles(dir, rootFilePrefix, sb.RootFiles)
}

// saveFiles writes each file's bytes to dir/PREFIX<index> with its mode.
func (a *app) saveFiles(dir, prefix string, files []copyFile) error {
	if len(files) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i, f := range files {
		p := filepath.Join(dir, prefix+strconv.Itoa(i))
		if err := os.WriteFile(p, f.data, 0o600); err != nil {
			return err
		}
		// WriteFile's mode passes through the umask; the guest gets SRC's bits.
		if err := os.Chmod(p, f.Mode); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) removePatches(name string) { _ = os.RemoveAll(a.patchDir(name)) }

// patchArgs places each copy at its destination in the holder's root, a
// file of the guest's like any other, as msb's patch is in its rootfs (a
// guest may rename over it): bwrap copies it from a descriptor, fd and up
// (files, which the caller closes once bwrap started). They come before
// the mounts, so a volume or tmpfs on a parent covers them, as a mount
// covers the rootfs in msb. Missing parents are made 0755, as msb's
// create_dir_all makes them (bubblewrap alone would make them 0700, out of
// a non-root user's reach).
func (a *app) patchArgs(sb *sandbox, fd int) (args []string, files []*os.File, err error) {
	place := func(src, dst string, mode os.FileMode) error {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		files = append(files, f)
		var parents []string
		for d := path.Dir(dst); d != "/" && d != "."; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			args = append(args, "--perms", "0755", "--dir", d)
		}
		args = append(args, "--perms", fmt.Sprintf("%04o", mode.Perm()), "--file", strconv.Itoa(fd+len(files)-1), dst)
		return nil
	}
	for i, f := range sb.CopyFiles {
		if err == nil {
			err = place(filepath.Join(a.patchDir(sb.Name), strconv.Itoa(i)), f.Dst, f.Mode)
		}
	}
	for i, f := range sb.RootFiles {
		if err == nil {
			err = place(filepath.Join(a.patchDir(sb.Name), rootFilePrefix+strconv.Itoa(i)), f.Dst, f.Mode)
		}
	}
	if err != nil {
		closeAll(files)
		return nil, nil, err
	}
	return args, files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// patchDoc is one entry of inspect's config.patches.
type patchDoc struct {
	CopyFile struct {
		Dst     string  `json:"dst"`
		Mode    *uint32 `json:"mode"`
		Replace bool    `json:"replace"`
		Src     string  `json:"src"`
	} `json:"CopyFile"`
}
