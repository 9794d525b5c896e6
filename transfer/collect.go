package transfer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/outputs"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// File is one collected output file.
type File struct {
	Path     string `json:"path"` // relative to the outputs root
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	MIMEType string `json:"mime_type"`
	HostPath string `json:"host_path,omitempty"`
}

// CollectOptions tune one collection.
type CollectOptions struct {
	Limits outputs.Limits
	// Allow names output paths the deny list refuses (.git, .bashrc,
	// .vscode, ...; see outputs.DeniedNames) that the caller wants
	// collected, each with everything below it.
	Allow []string
	// Overwrite replaces existing regular files in dest. Without it an
	// existing file is left alone and its output refused, unless it already
	// holds the same bytes.
	Overwrite bool
}

// Result says what a collection did. Partial is set when any entry of the
// outputs was not collected; Refused names each (Unlisted counts those the
// guest did not name) with its reason.
type Result struct {
	Files    []File            `json:"files"`
	Refused  []outputs.Refusal `json:"refused"`
	Unlisted int               `json:"unlisted"`
	Partial  bool              `json:"partial"`
}

// listTimeout is the deadline of the listing; a fetch has those of a
// transfer (withDeadlines).
const listTimeout = time.Minute

// tarOverhead bounds what tar adds per file (headers, pax records, padding).
const tarOverhead = 8 << 10

// Collect lists the session's outputs (one guest command) and fetches the
// ones the listing accepts (one more), verifying each file's size and
// sha256 against the listing while it streams into a private staging
// directory inside dest. Only then are the files moved into place, never
// following a symlink on the host and never replacing an existing file
// unless o.Overwrite. Entries that cannot be collected — over a limit,
// denied, not a regular file, changed while fetched, in the way of a host
// file — are refused one by one and the rest is collected. An error means
// nothing was collected and dest is as it was.
func Collect(ctx context.Context, s session.Session, dest string, o CollectOptions) (*Result, error) {
	policy := outputs.Policy{Limits: o.Limits, Allow: o.Allow}
	if err := policy.CheckAllow(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPath, err)
	}
	listing, err := List(ctx, s, policy)
	if err != nil {
		return nil, err
	}
	res := &Result{Files: []File{}, Refused: listing.Refused, Unlisted: listing.Unlisted}
	if len(listing.Records) > 0 {
		files, refused, err := collectFiles(ctx, s, dest, listing.Records, o.Overwrite)
		if err != nil {
			return nil, err
		}
		res.Files = files
		res.Refused = append(res.Refused, refused...)
	}
	sort.SliceStable(res.Refused, func(i, j int) bool { return res.Refused[i].Path < res.Refused[j].Path })
	res.Partial = len(res.Refused) > 0 || res.Unlisted > 0
	return res, nil
}

func collectFiles(ctx context.Context, s session.Session, dest string, records []outputs.Record, overwrite bool) ([]File, []outputs.Refusal, error) {
	st, err := openStage(dest)
	if err != nil {
		return nil, nil, fmt.Errorf("collect outputs into %s: %w", dest, err)
	}
	defer st.close()
	fetched, refused, err := Fetch(ctx, s, records, st.sink)
	if err != nil {
		return nil, nil, err
	}
	files, notPlaced, err := st.install(fetched, overwrite)
	if err != nil {
		return nil, nil, fmt.Errorf("collect outputs into %s: %w", dest, err)
	}
	for i := range files {
		files[i].HostPath = filepath.Join(dest, filepath.FromSlash(files[i].Path))
	}
	return files, append(refused, notPlaced...), nil
}

// List runs the guest agent's listing and parses its records strictly.
func List(ctx context.Context, s session.Session, p outputs.Policy) (*outputs.Listing, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	cmd := session.Command{Builtin: agentwire.BuiltinOutputsList, Args: outputs.ListingArgs(s.Paths().Outputs, p)}
	res, err := s.Shell(ctx, cmd,
		session.ShellOptions{MaxOutput: p.MaxListingBytes(), GuestTimeout: listTimeout})
	if err != nil {
		return nil, fmt.Errorf("list outputs: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("list outputs: guest exit %d: %s", res.ExitCode, guestText(res.Stderr))
	}
	return outputs.ParseListing(res.Stdout, p)
}

// guestText bounds and cleans guest stderr quoted in an error.
func guestText(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 1024 {
		b = b[:1024]
	}
	return fmt.Sprintf("%q", b)
}

// Sink opens where one record's bytes go; done(ok) finishes it, ok saying
// whether the bytes were verified (when not, the sink discards them).
type Sink func(outputs.Record) (w io.Writer, done func(ok bool) error, err error)

// Fetch streams the listed files out of the guest in one tar archive (the
// guest agent's outputs-fetch, which follows no link) and
// hands each, verified, to sink. The archive must hold the records in
// order, each at most once and nothing else; a record that is missing,
// arrives as something other than a regular file, or whose size or sha256
// changed since the listing is refused, and the others are still fetched.
// An error (a malformed archive, a sink that fails, a deadline) means no
// file is usable.
func Fetch(ctx context.Context, s session.Session, records []outputs.Record, sink Sink) ([]File, []outputs.Refusal, error) {
	var names bytes.Buffer
	var budget int64
	for _, r := range records {
		names.WriteString(r.Path)
		names.WriteByte(0)
		budget += r.Size + tarOverhead
	}
	dl, ctx, cancel := withDeadlines(ctx, "the outputs' fetch", budget)
	defer cancel(nil)
	pr, pw := io.Pipe()
	type outcome struct {
		files   []File
		refused []outputs.Refusal
		err     error
	}
	done := make(chan outcome, 1)
	go func() {
		files, refused, err := readArchive(pr, records, sink)
		if err != nil {
			cancel(err)
		}
		pr.CloseWithError(err) // unblocks the writer below if we stopped early
		done <- outcome{files, refused, err}
	}()
	cmd := session.Command{Builtin: agentwire.BuiltinOutputsFetch, Args: []string{s.Paths().Outputs}}
	res, err := s.Shell(ctx, cmd, session.ShellOptions{
		Stdin:        &names,
		Stdout:       func(p []byte) { dl.relay(pw, p) },
		MaxOutput:    budget + tarOverhead,
		GuestTimeout: dl.guestTimeout(),
	})
	// Whichever failed first is the cause: a bad archive makes the reader
	// cancel the call, and a call that ended early cuts the archive short.
	cause := context.Cause(ctx) // before the reader sees the stream end
	pw.Close()
	got := <-done
	if dl.ended(cause) {
		return nil, nil, fmt.Errorf("fetch outputs: %w", cause)
	}
	if err != nil && (got.err == nil || !errors.Is(cause, got.err)) {
		return nil, nil, fmt.Errorf("fetch outputs: %w", err)
	}
	if got.err != nil {
		return nil, nil, fmt.Errorf("fetch outputs: %w", got.err)
	}
	// The archive, complete and checked entry by entry, says which files
	// vanished or changed; a fetch that stopped short fails as a whole.
	if res.ExitCode != 0 {
		return nil, nil, fmt.Errorf("fetch outputs: guest exit %d: %s", res.ExitCode, guestText(res.Stderr))
	}
	return got.files, got.refused, nil
}

func readArchive(r io.Reader, records []outputs.Record, sink Sink) ([]File, []outputs.Refusal, error) {
	tr := tar.NewReader(r)
	files := make([]File, 0, len(records))
	var refused []outputs.Refusal
	next := 0 // the first record not yet seen in the archive
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: archive broken after %d of %d files: %v", outputs.ErrUnsafeOutput, next, len(records), err)
		}
		name := h.Name
		if h.Typeflag == tar.TypeDir {
			name = strings.TrimSuffix(name, "/")
		}
		i := next
		for i < len(records) && records[i].Path != name {
			i++
		}
		if i == len(records) {
			return nil, nil, fmt.Errorf("%w: archive holds %q, which was not listed or is out of order", outputs.ErrUnsafeOutput, name)
		}
		for _, skipped := range records[next:i] {
			refused = append(refused, outputs.Refusal{Path: skipped.Path, Reason: "vanished before it was fetched"})
		}
		next = i + 1
		rec := records[i]
		if reason := entryReason(h, rec); reason != "" {
			refused = append(refused, outputs.Refusal{Path: rec.Path, Reason: reason})
			continue
		}
		reason, err := copyVerified(tr, rec, sink)
		if err != nil {
			return nil, nil, err
		}
		if reason != "" {
			refused = append(refused, outputs.Refusal{Path: rec.Path, Reason: reason})
			continue
		}
		files = append(files, File{Path: rec.Path, Size: rec.Size, SHA256: rec.SHA256, MIMEType: outputs.MIMEType(rec.Path)})
	}
	for _, missing := range records[next:] {
		refused = append(refused, outputs.Refusal{Path: missing.Path, Reason: "vanished before it was fetched"})
	}
	// Drain the stream so the guest's tar is not killed by a closed pipe.
	_, _ = io.Copy(io.Discard, r)
	return files, refused, nil
}

// entryReason says why an archive entry cannot be the listed file, or "".
func entryReason(h *tar.Header, rec outputs.Record) string {
	switch h.Typeflag {
	case tar.TypeReg:
	case tar.TypeSymlink:
		return "replaced by a symbolic link after it was listed"
	case tar.TypeLink:
		return "became a hard link after it was listed"
	case tar.TypeDir:
		return "replaced by a directory after it was listed"
	default:
		return fmt.Sprintf("replaced by a non-regular file (tar type %q) after it was listed", h.Typeflag)
	}
	if h.Size != rec.Size {
		return fmt.Sprintf("changed after it was listed: %d bytes listed, %d fetched", rec.Size, h.Size)
	}
	return ""
}

// copyVerified streams one entry into the sink through a Verifier. A file
// whose bytes do not match the listing is refused (reason), not fatal; a
// failing sink or a broken stream is an error.
func copyVerified(tr io.Reader, rec outputs.Record, sink Sink) (reason string, err error) {
	w, finish, err := sink(rec)
	if err != nil {
		return "", err
	}
	v := outputs.NewVerifier(w, rec)
	src := &readErr{r: tr}
	_, err = io.Copy(v, src)
	if src.err != nil {
		err = fmt.Errorf("%w: archive broken in %q: %v", outputs.ErrUnsafeOutput, rec.Path, src.err)
	}
	if err == nil {
		err = v.Finish()
	}
	ok := err == nil
	if ferr := finish(ok); err == nil {
		err = ferr
	}
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, outputs.ErrChecksum):
		return "changed after it was listed: its sha256 differs", nil
	case src.err != nil:
		return "", err
	}
	// The sink failed (a full disk): its own error names no entry.
	return "", fmt.Errorf("stage %q: %w", rec.Path, err)
}

// readErr remembers its reader's error, to tell a broken archive from a
// failing sink.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}
