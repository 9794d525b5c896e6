// Command quickstart is a program outside the oma-sandbox module that
// imports only its root package: it opens a session with Backend "auto",
// writes, reads, edits, globs, runs bash, collects outputs and closes.
// TestQuickstartOutsideModule builds it against this checkout.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: quickstart DESTDIR")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dest string) (err error) {
	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "auto", WorkspaceID: "w1", SessionID: "s1"})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(ctx); err == nil {
			err = cerr
		}
	}()
	fmt.Println("backend:", s.Backend())
	if err := s.Write(ctx, "main.go", []byte("package main\n\nconst greeting = \"a\"\n")); err != nil {
		return err
	}
	if err := s.Edit(ctx, "main.go", omasandbox.Edit{Old: `"a"`, New: `"b"`}); err != nil {
		return err
	}
	text, err := s.Read(ctx, "main.go", omasandbox.ReadOptions{Offset: 3, Limit: 1})
	if err != nil {
		return err
	}
	fmt.Printf("read: %q\n", text)
	paths, err := s.Glob(ctx, "**/*.go")
	if err != nil {
		return err
	}
	fmt.Println("glob:", paths)
	res, err := s.Bash(ctx, "grep -c greeting main.go > "+s.Paths().Outputs+"/count.txt && echo ok",
		omasandbox.BashOptions{Timeout: time.Minute})
	if err != nil {
		return err
	}
	fmt.Printf("bash: %q exit %d\n", res.Text, res.ExitCode)
	got, err := s.CollectOutputs(ctx, dest)
	if err != nil {
		return err
	}
	for _, f := range got.Files {
		data, err := os.ReadFile(filepath.Join(dest, f.Path))
		if err != nil {
			return err
		}
		fmt.Printf("output: %s %q\n", f.Path, data)
	}
	return nil
}
