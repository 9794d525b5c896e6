package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// spinner shows msg with a spinner on stderr until the returned func is
// called, then clears the line. It does nothing unless stderr is a terminal,
// so scripts and logs see no progress noise.
func (c *cli) spinner(msg string) func() {
	if !isTerminal(c.stderr) {
		return func() {}
	}
	f := c.stderr
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		frames := `|/-\`
		tick := time.NewTicker(120 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for i := 0; ; i++ {
			fmt.Fprintf(f, "\r%c %s… %.1fs", frames[i%len(frames)], msg, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
