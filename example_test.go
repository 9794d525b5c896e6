package omasandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
)

// Open a session, write a file, read it back, run a command, close.
func Example() {
	ctx := context.Background()
	stateDir, _ := os.MkdirTemp("", "omasandbox-example-") // "" would mean ~/.cache/oma-sandbox/local
	defer os.RemoveAll(stateDir)

	s, err := omasandbox.Open(ctx, omasandbox.Options{
		Backend: "local", WorkspaceID: "w1", SessionID: "s1", StateDir: stateDir,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	if err := s.Write(ctx, "hello.txt", []byte("one\ntwo\nthree\n")); err != nil {
		fmt.Println(err)
		return
	}
	text, err := s.Read(ctx, "hello.txt", omasandbox.ReadOptions{Offset: 2, Limit: 1})
	fmt.Printf("read: %q %v\n", text, err)

	res, err := s.Bash(ctx, "wc -l < hello.txt; exit 3", omasandbox.BashOptions{})
	fmt.Printf("bash: %q exit %d %v\n", res.Text, res.ExitCode, err)
	// Output:
	// read: "two\n\n[2 more lines in file. Use offset=3 to continue.]" <nil>
	// bash: "3\n\n\nCommand exited with code 3" exit 3 <nil>
}

// Edit replaces exact text; an old text that does not occur changes nothing.
func ExampleSession_Edit() {
	ctx := context.Background()
	stateDir, _ := os.MkdirTemp("", "omasandbox-example-")
	defer os.RemoveAll(stateDir)
	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: stateDir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	_ = s.Write(ctx, "main.go", []byte("package main\n\nfunc main() { println(\"a\") }\n"))
	err = s.Edit(ctx, "main.go", omasandbox.Edit{Old: `"a"`, New: `"b"`})
	fmt.Println("edit:", err)
	text, _ := s.Read(ctx, "main.go", omasandbox.ReadOptions{})
	fmt.Print(text)

	err = s.Edit(ctx, "main.go", omasandbox.Edit{Old: "missing", New: "x"})
	var editErr *omasandbox.EditError
	fmt.Println(errors.As(err, &editErr), errors.Is(err, omasandbox.ErrInvalidInput), err)
	// Output:
	// edit: <nil>
	// package main
	//
	// func main() { println("b") }
	// true true Could not edit file: main.go. Edit 1: oldText was not found. It must match the file exactly, including whitespace and newlines.
}

// Glob finds files by path, Grep by content; Call runs a model's tool call
// and returns the text the model should see.
func ExampleSession_Glob() {
	ctx := context.Background()
	stateDir, _ := os.MkdirTemp("", "omasandbox-example-")
	defer os.RemoveAll(stateDir)
	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: stateDir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	_ = s.Write(ctx, "cmd/main.go", []byte("package main // TODO: flags\n"))
	_ = s.Write(ctx, "lib/lib.go", []byte("package lib\n"))
	_ = s.Write(ctx, "README.md", []byte("# TODO\n"))

	paths, err := s.Glob(ctx, "**/*.go")
	fmt.Println(paths, err)
	paths, err = s.Grep(ctx, "TODO", omasandbox.SearchOptions{Glob: "*.go"})
	fmt.Println(paths, err)
	text, err := s.Call(ctx, "glob", json.RawMessage(`{"pattern":"*.md"}`))
	fmt.Println(text, err)

	_, err = s.Glob(ctx, "*", omasandbox.SearchOptions{Path: "/etc"})
	fmt.Println(errors.Is(err, omasandbox.ErrOutsideWorkspace), err)
	// Output:
	// [cmd/main.go lib/lib.go] <nil>
	// [/workspace/cmd/main.go] <nil>
	// README.md <nil>
	// true glob: path "/etc" escapes /workspace, /mnt/session/uploads
}

// Upload gives the agent read-only files; CollectOutputs brings back what it
// left in the outputs directory, verified.
func ExampleSession_CollectOutputs() {
	ctx := context.Background()
	stateDir, _ := os.MkdirTemp("", "omasandbox-example-")
	defer os.RemoveAll(stateDir)
	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: stateDir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	err = s.Upload(ctx, omasandbox.UploadFile{Path: "data/in.csv", Content: []byte("a,b\n1,2\n")})
	fmt.Println("upload:", err)
	p := s.Paths()
	cmd := fmt.Sprintf("tr , ';' < %s/data/in.csv > %s/out.csv", p.Uploads, p.Outputs)
	res, err := s.Bash(ctx, cmd, omasandbox.BashOptions{})
	fmt.Printf("%q %v\n", res.Text, err)

	dest := filepath.Join(stateDir, "collected")
	got, err := s.CollectOutputs(ctx, dest)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range got.Files {
		data, _ := os.ReadFile(filepath.Join(dest, f.Path))
		fmt.Printf("%s %d %q\n", f.Path, f.Size, data)
	}
	// Output:
	// upload: <nil>
	// "(no output)" <nil>
	// out.csv 8 "a;b\n1;2\n"
}

// Doctor says which backends this host can run, and why not.
func ExampleDoctor() {
	report := omasandbox.Doctor(context.Background(), omasandbox.DoctorOptions{Msb: "/nonexistent/msb"})
	for _, b := range report.Backends {
		fmt.Println(b.Name, "checks:", len(b.Checks) > 0)
	}
	fmt.Println("msb usable:", report.Backends[0].Usable)
	// Output:
	// msb checks: true
	// local checks: true
	// msb usable: false
}
