//go:build linux

package selfagent

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/oma-sandbox/oma-sandbox/guestagent"
)

// The program serves as the agent when started as one: at GuestPath,
// staged beside it (StagedPrefix), or as the agent starts itself again
// (guestagent.ProgramName), as the egress relay does.
func init() {
	staged, ok := strings.CutPrefix(os.Args[0], StagedPrefix)
	if os.Args[0] == GuestPath || ok && !strings.Contains(staged, "/") || filepath.Base(os.Args[0]) == guestagent.ProgramName {
		os.Exit(guestagent.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// static reads the program running, as bundle.SelfCached copies it: not
// what lies at its path now.
var static = sync.OnceValues(func() (bool, error) { return isStatic("/proc/self/exe") })

// isStatic reports whether the ELF file at path needs no dynamic loader.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// Guest reports whether this program can serve as the agent in a guest
// of architecture goarch, and why not: it must be a Linux program of that
// architecture, and static, since nothing tells which C library (if any)
// a guest's image holds.
func Guest(goarch string) (ok bool, why string) {
	if runtime.GOARCH != goarch {
		return false, fmt.Sprintf("this program is linux/%s, the guest linux/%s", runtime.GOARCH, goarch)
	}
	switch ok, err := static(); {
	case err != nil:
		return false, fmt.Sprintf("this program cannot be read (%v)", err)
	case !ok:
		return false, "this program is linked with the C library (cgo), which a guest may not have"
	}
	return true, ""
}
