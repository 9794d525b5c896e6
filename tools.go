package omasandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"
	"unicode/utf8"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// Definition is one tool's name, description and JSON Schema input, as a
// model's tool list wants it.
type Definition = tools.Definition

// Definitions returns the tool schemas (read, write, edit, ls, glob, grep,
// bash), sorted by name: what Call accepts.
func Definitions() []Definition { return tools.Definitions() }

// Call runs the named tool with a model's JSON input and returns the result
// text the model should see; an error's text is also meant for the model.
// The typed methods go through Call, so both faces validate alike and
// return the same texts. A bash command that exits non-zero or times out is
// a *CommandError whose Text is the result.
func (s *Session) Call(ctx context.Context, name string, input json.RawMessage) (string, error) {
	return s.tb.Call(ctx, name, input, nil)
}

// call marshals a typed method's input for the tool of that name.
func (s *Session) call(ctx context.Context, name string, input map[string]any, progress tools.Progress) (string, error) {
	raw, err := json.Marshal(input)
	if err != nil {
		return "", &InputError{Tool: name, Msg: fmt.Sprintf("%s input: %v", name, err)}
	}
	return s.tb.Call(ctx, name, raw, progress)
}

// Write writes content to path (relative to the workspace, or absolute
// inside it), creating parent directories and replacing an existing file
// atomically. content must be UTF-8 text, as the write tool carries it.
func (s *Session) Write(ctx context.Context, file string, content []byte) error {
	if !utf8.Valid(content) {
		return &InputError{Tool: "write", Msg: fmt.Sprintf("write content for %s is not UTF-8 text; upload binary files with Upload", file)}
	}
	_, err := s.call(ctx, "write", map[string]any{"path": file, "content": string(content)}, nil)
	return err
}

// ReadOptions page through a long file. Offset is the first line (1-based;
// 0 also means the first), Limit the most lines (0: the tool's 2000).
type ReadOptions struct {
	Offset int
	Limit  int
}

// Read returns the read tool's text for path: the file's lines, with a
// bracketed note when the file goes on, or a description of a binary file.
func (s *Session) Read(ctx context.Context, file string, o ReadOptions) (string, error) {
	in := map[string]any{"path": file}
	if o.Offset != 0 {
		in["offset"] = o.Offset
	}
	if o.Limit != 0 {
		in["limit"] = o.Limit
	}
	return s.call(ctx, "read", in, nil)
}

// Edit is one exact replacement: Old must occur exactly once in the file.
type Edit struct {
	Old string
	New string
}

// Edit applies the replacements to the original file at once; when any Old
// is missing, repeated or overlaps another, nothing is changed and the error
// is an *EditError (matching ErrInvalidInput).
func (s *Session) Edit(ctx context.Context, file string, edits ...Edit) error {
	list := make([]map[string]string, 0, len(edits))
	for _, e := range edits {
		list = append(list, map[string]string{"oldText": e.Old, "newText": e.New})
	}
	_, err := s.call(ctx, "edit", map[string]any{"path": file, "edits": list}, nil)
	return err
}

// SearchOptions narrow Glob and Grep.
type SearchOptions struct {
	// Path is the directory to search. Glob: "" is the workspace, and the
	// uploads root is allowed; a relative Path is below the workspace.
	// Grep: "" is the workspace; otherwise an absolute path in the
	// workspace, uploads or skills.
	Path string
	// Glob keeps only Grep's files whose path matches it.
	Glob string
	// Limit is at most how many files Grep returns (1-100; 0: 100).
	Limit int
}

// Glob returns the files whose path matches pattern (*, **, ?, [classes],
// {a,b}; an implicit **/ prefix, dotfiles included), at most 100, relative
// to the workspace unless Path is absolute. Call("glob", ...) says when
// more match.
func (s *Session) Glob(ctx context.Context, pattern string, opts ...SearchOptions) ([]string, error) {
	o := one(opts)
	in := map[string]any{"pattern": pattern}
	if o.Path != "" {
		in["path"] = o.Path
	}
	return s.search(ctx, "glob", in)
}

// Grep returns the absolute paths of the files whose contents match the
// ripgrep regex pattern, in path order (binary files skipped).
func (s *Session) Grep(ctx context.Context, pattern string, opts ...SearchOptions) ([]string, error) {
	o := one(opts)
	if o.Path == "" {
		o.Path = s.Paths().Workspace
	}
	in := map[string]any{"pattern": pattern, "path": o.Path}
	if o.Glob != "" {
		in["glob"] = o.Glob
	}
	if o.Limit != 0 {
		in["head_limit"] = o.Limit
	}
	return s.search(ctx, "grep", in)
}

func (s *Session) search(ctx context.Context, name string, in map[string]any) ([]string, error) {
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, &InputError{Tool: name, Msg: fmt.Sprintf("%s input: %v", name, err)}
	}
	found, err := s.tb.CallSearch(ctx, name, raw)
	if err != nil {
		return nil, err
	}
	return found.Paths, nil
}

func one[T any](opts []T) T {
	var o T
	if len(opts) > 0 {
		o = opts[len(opts)-1]
	}
	return o
}

// Ls returns the ls tool's listing of dir ("" is the workspace): entries
// sorted case-insensitively, directories suffixed with /.
func (s *Session) Ls(ctx context.Context, dir string) (string, error) {
	in := map[string]any{}
	if dir != "" {
		in["path"] = dir
	}
	return s.call(ctx, "ls", in, nil)
}

// BashOptions tune one Bash call.
type BashOptions struct {
	// Timeout ends the command in the guest; it is rounded up to whole
	// seconds, at most an hour. 0 means Options.OperationTimeout.
	Timeout time.Duration
	// Progress, when set, receives the output as it arrives.
	Progress func([]byte)
}

// BashResult is how a command ended. Text is the bash tool's result: the
// combined output, then a note for a non-zero exit or a timeout.
type BashResult struct {
	Text     string
	ExitCode int
	TimedOut bool
}

// Bash runs command with bash in the workspace. A non-zero exit is not an
// error; a timeout returns the result (TimedOut set) with an error matching
// ErrGuestTimeout. Other errors mean the command did not run to its end.
func (s *Session) Bash(ctx context.Context, command string, o BashOptions) (BashResult, error) {
	in := map[string]any{"command": command}
	if o.Timeout > 0 {
		in["timeout"] = int64((o.Timeout + time.Second - 1) / time.Second)
	}
	text, err := s.call(ctx, "bash", in, o.Progress)
	var cmdErr *CommandError
	switch {
	case err == nil:
		return BashResult{Text: text}, nil
	case errors.As(err, &cmdErr) && cmdErr.TimedOut:
		return BashResult{Text: cmdErr.Text, ExitCode: cmdErr.ExitCode, TimedOut: true},
			fmt.Errorf("bash: %w", session.ErrGuestTimeout)
	case errors.As(err, &cmdErr):
		return BashResult{Text: cmdErr.Text, ExitCode: cmdErr.ExitCode}, nil
	}
	return BashResult{}, err
}

// UploadFile is one file to place under the session's uploads root, where
// the agent can read it but not change it.
type UploadFile struct {
	// Path is relative to the uploads root (Paths().Uploads).
	Path    string
	Content []byte
}

// Upload places files under the uploads root in one guest command.
// Unsafe paths match ErrUnsafePath, and files past Options.UploadLimits
// transfer.ErrTooLarge; nothing is placed then.
func (s *Session) Upload(ctx context.Context, files ...UploadFile) error {
	mounts := make([]transfer.Mount, 0, len(files))
	for _, f := range files {
		if path.IsAbs(f.Path) {
			return s.materialize(ctx, nil, nil, fmt.Errorf("%w: upload path %q must be relative to the uploads root", ErrUnsafePath, f.Path))
		}
		sum := sha256.Sum256(f.Content)
		mounts = append(mounts, transfer.Mount{
			Kind: transfer.Upload, Path: s.Paths().Uploads + "/" + f.Path,
			Size: int64(len(f.Content)), SHA256: hex.EncodeToString(sum[:]), Content: bytes.NewReader(f.Content),
		})
	}
	return s.materialize(ctx, s.uploads, mounts, nil)
}

// Materialize places mounts (uploads and skills, each read from its
// Content) in one guest command within q's limits, and records it as an
// upload (its span and UploadedBytesMetric). Upload is Materialize of
// in-memory files under the uploads root within Options.UploadLimits.
func (s *Session) Materialize(ctx context.Context, q *transfer.Quota, mounts []transfer.Mount) error {
	return s.materialize(ctx, q, mounts, nil)
}

// materialize is Materialize, or the span of an upload refused before it
// started (refused).
func (s *Session) materialize(ctx context.Context, q *transfer.Quota, mounts []transfer.Mount, refused error) (err error) {
	ctx, span := s.beginTransfer(ctx, "upload")
	var size int64
	for _, m := range mounts {
		size += m.Size
	}
	defer func() {
		if err != nil {
			size = 0 // nothing was placed
		}
		s.endTransfer(ctx, span, err, s.meters.uploaded, size, attrFiles.Int(len(mounts)))
	}()
	if refused != nil {
		return refused
	}
	return q.Materialize(ctx, s.sess, mounts)
}

// CollectOptions and Collected are transfer's; see transfer.Collect.
type (
	CollectOptions = transfer.CollectOptions
	Collected      = transfer.Result
	OutputFile     = transfer.File
)

// CollectOutputs copies the files the agent left under Paths().Outputs into
// destDir, verifying each one's size and sha256, never following a symlink
// on the host and never replacing a host file unless o.Overwrite. What
// could not be collected is listed in Refused, one reason each. An error
// means nothing was collected.
func (s *Session) CollectOutputs(ctx context.Context, destDir string, opts ...CollectOptions) (*Collected, error) {
	ctx, span := s.beginTransfer(ctx, "collect")
	res, err := transfer.Collect(ctx, s.sess, destDir, one(opts))
	var size int64
	var files, refused int
	if res != nil {
		for _, f := range res.Files {
			size += f.Size
		}
		files, refused = len(res.Files), len(res.Refused)
	}
	s.endTransfer(ctx, span, err, s.meters.collected, size, attrFiles.Int(files), attrRefused.Int(refused))
	return res, err
}
