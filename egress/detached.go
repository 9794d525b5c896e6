//go:build linux

package egress

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// DetachedName is the file name a program linking this package is run
// under to serve as a detached proxy (ServeDetached), one that outlives
// the process that started it, as the sandbox it serves does.
const DetachedName = "oma-egress-proxy"

func init() {
	if filepath.Base(os.Args[0]) == DetachedName {
		os.Exit(ServeDetached(os.Args[1:], os.Stdin, os.Stderr))
	}
}

// DetachedConfig is what a detached proxy reads on its stdin: never on its
// command line, which every host user can read.
type DetachedConfig struct {
	Policy  Policy
	Secrets []SecretValue
}

// detachedConfig is DetachedConfig on the wire: a SecretValue would be
// only its Secret's text (which it embeds).
type detachedConfig struct {
	Policy  Policy          `json:"policy"`
	Secrets []detachedValue `json:"secrets,omitempty"`
}

type detachedValue struct {
	Secret      Secret `json:"secret"`
	Placeholder string `json:"placeholder"`
	Value       string `json:"value"`
}

// MarshalJSON writes the configuration with each secret's placeholder and
// value.
func (c DetachedConfig) MarshalJSON() ([]byte, error) {
	w := detachedConfig{Policy: c.Policy}
	for _, s := range c.Secrets {
		w.Secrets = append(w.Secrets, detachedValue{s.Secret, s.Placeholder, s.Value})
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *DetachedConfig) UnmarshalJSON(b []byte) error {
	var w detachedConfig
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	c.Policy, c.Secrets = w.Policy, nil
	for _, s := range w.Secrets {
		c.Secrets = append(c.Secrets, SecretValue{s.Secret, s.Placeholder, s.Value})
	}
	return nil
}

// Descriptors a detached proxy is started with.
const (
	DetachedListenFD   = 3 // a listening unix socket
	DetachedRefusalsFD = 4 // the refusal log, opened for appending
	DetachedWatchFD    = 5 // a pidfd of the process it serves
)

// MaxRefusalLog bounds the refusal log: past it the log starts again
// empty, so a guest that tries endless destinations cannot fill the host's
// disk (ReadRefusals reads a log that started again from its start).
const MaxRefusalLog = 1 << 20

// ServeDetached serves a proxy configured by stdin (a DetachedConfig) on
// the listener at DetachedListenFD until the process whose pidfd is
// DetachedWatchFD exits, appending each refusal to the log at
// DetachedRefusalsFD as a line of JSON. It takes no arguments and returns
// the exit status.
func ServeDetached(args []string, stdin io.Reader, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "oma-sandbox egress proxy: %v\n", err)
		return 1
	}
	if len(args) > 0 {
		return fail(fmt.Errorf("unexpected argument %q", args[0]))
	}
	var cfg DetachedConfig
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&cfg); err != nil {
		return fail(fmt.Errorf("configuration: %w", err))
	}
	if err := cfg.Policy.Validate(); err != nil {
		return fail(err)
	}
	lf := os.NewFile(DetachedListenFD, "listener")
	l, err := net.FileListener(lf)
	lf.Close()
	if err != nil {
		return fail(fmt.Errorf("listener: %w", err))
	}
	log := &refusalLog{f: os.NewFile(DetachedRefusalsFD, "refusals")}
	p := &Proxy{Policy: cfg.Policy, Secrets: cfg.Secrets, Refused: log.add}
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	watched := make(chan error, 1)
	go func() { watched <- waitExit(DetachedWatchFD) }()
	select {
	case err = <-served:
	case err = <-watched:
	}
	l.Close()
	p.Close()
	if err != nil {
		return fail(err)
	}
	return 0
}

// waitExit waits until the process of pidfd fd exits (its pidfd turns
// readable).
func waitExit(fd int) error {
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("watching the sandbox: %w", err)
		}
	}
}

// refusalLog appends refusals to a file as lines of JSON, starting it
// again empty past MaxRefusalLog.
type refusalLog struct {
	mu      sync.Mutex
	f       *os.File
	written int64
}

func (r *refusalLog) add(e *RefusedError) {
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	line = append(line, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.written+int64(len(line)) > MaxRefusalLog {
		if r.f.Truncate(0) != nil {
			return
		}
		r.written = 0
	}
	n, _ := r.f.Write(line)
	r.written += int64(n)
}

// ReadRefusals reads the refusals a detached proxy logged in f from
// offset on, and the offset after them. A log shorter than offset started
// again: it is read from its start. A line not yet ended is left for the
// next read.
func ReadRefusals(f *os.File, offset int64) ([]RefusedError, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, offset, err
	}
	if fi.Size() < offset {
		offset = 0
	}
	r := bufio.NewReader(io.NewSectionReader(f, offset, fi.Size()-offset))
	var out []RefusedError
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			// io.EOF: the rest, if any, is not a whole line yet.
			return out, offset, nil
		}
		offset += int64(len(line))
		var e RefusedError
		if json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
}

// LogSize is where a reader of f starts to see only what is logged from
// now on.
func LogSize(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}
