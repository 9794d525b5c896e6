// Package omasandbox is the one import a Go agent runtime needs: open a
// sandbox session on the best backend this host has, call the agent tools
// (read, write, edit, ls, glob, grep, bash) with typed methods or with a
// model's JSON tool calls, upload files, collect outputs, and close.
//
//	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "auto", WorkspaceID: "w1", SessionID: "s1"})
//	if err != nil {
//		return err
//	}
//	defer s.Close(ctx)
//	err = s.Write(ctx, "main.go", []byte(src))
//	text, err := s.Read(ctx, "main.go", omasandbox.ReadOptions{Offset: 1, Limit: 200})
//	err = s.Edit(ctx, "main.go", omasandbox.Edit{Old: "a", New: "b"})
//	paths, err := s.Glob(ctx, "**/*.go")
//	res, err := s.Bash(ctx, "go test ./...", omasandbox.BashOptions{Timeout: time.Minute, Progress: fn})
//	out, err := s.Call(ctx, "grep", json.RawMessage(`{"pattern":"TODO","path":"/workspace"}`))
//	err = s.Upload(ctx, omasandbox.UploadFile{Path: "data.csv", Content: data})
//	got, err := s.CollectOutputs(ctx, destDir)
//	report := omasandbox.Doctor(ctx, omasandbox.DoctorOptions{})
//
// A session outlives the process that opened it until Close (or the
// reaper): Attach(ctx, s.Name(), opts) reopens it elsewhere. Paths tells
// where the workspace, uploads and outputs appear to commands (the same on
// both backends: /workspace, /mnt/session/uploads, /mnt/session/outputs).
//
// # Backends
//
// Backend "msb" runs each session in its own microVM through the msb CLI;
// "local" runs each command under bubblewrap on this host, with a state
// directory of its own; "auto" (or "") picks msb when Doctor finds it
// usable and local otherwise. Doctor reports, check by check, why a backend
// is not usable.
//
// # Tools
//
// Definitions returns the tool schemas for a model's tool list, and Call
// runs a model's tool call, returning the text the model should see. The
// typed methods (Write, Read, Edit, Glob, Grep, Ls, Bash) go through the
// same implementation and return the same texts, so a runtime may mix them.
// Everything inside the sandbox is treated as hostile: the host never
// follows a guest symlink and verifies every file it brings out.
//
// # Errors
//
// Errors match the sentinels of this package with errors.Is: ErrInvalid
// (a refused option), ErrNotFound and ErrGone (no such session, or removed
// from outside), ErrPoisoned (the guest's state became unknown; close the
// session), ErrGuestTimeout and ErrHostTimeout, ErrInvalidInput and
// ErrOutsideWorkspace (a refused tool input; nothing ran). *InputError,
// *EditError, *CommandError and *GuestError carry the details.
package omasandbox
