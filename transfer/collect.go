package transfer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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

// tarScript streams the NUL-separated relative paths on stdin as one tar
// archive, without following symlinks (a swapped-in link arrives as a link
// entry and is refused by the host).
const tarScript = `set -eu
cd -- "$1"
exec tar -c --no-recursion --null -T - -f -
`

// tarOverhead bounds what tar adds per file (headers, pax records, padding).
const tarOverhead = 8 << 10

// Collect lists the session's outputs (one guest command) and fetches them
// all (one more), writing each file under dest and verifying its size and
// sha256 against the listing. A lying guest is refused: a file never grows
// past its listed size on the host. Files land atomically (temp + rename),
// and a collection that fails removes the files it wrote.
func Collect(ctx context.Context, s session.Session, dest string, l outputs.Limits) ([]File, error) {
	records, err := List(ctx, s, l)
	if err != nil || len(records) == 0 {
		return nil, err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, err
	}
	var written []string
	files, err := Fetch(ctx, s, records, func(r outputs.Record) (io.Writer, func(ok bool) error, error) {
		host, err := outputs.SafeJoin(dest, r.Path)
		if err != nil {
			return nil, nil, err
		}
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			return nil, nil, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(host), ".oma-output-*")
		if err != nil {
			return nil, nil, err
		}
		return tmp, func(ok bool) error {
			err := tmp.Close()
			if ok && err == nil {
				err = os.Rename(tmp.Name(), host)
			}
			if !ok || err != nil {
				os.Remove(tmp.Name())
				return err
			}
			written = append(written, host)
			return nil
		}, nil
	})
	if err != nil {
		for _, p := range written {
			os.Remove(p)
		}
		return nil, err
	}
	for i := range files {
		files[i].HostPath, _ = outputs.SafeJoin(dest, files[i].Path)
	}
	return files, nil
}

// List runs the listing script and parses its records strictly.
func List(ctx context.Context, s session.Session, l outputs.Limits) ([]outputs.Record, error) {
	script, args := outputs.ListingScript(s.Paths().Outputs, l)
	res, err := s.Shell(ctx, session.Command{Script: script, Args: args},
		session.ShellOptions{MaxOutput: l.MaxListingBytes()})
	if err != nil {
		return nil, fmt.Errorf("list outputs: %w", err)
	}
	switch res.ExitCode {
	case 0:
	case outputs.QuotaExitCode:
		return nil, outputs.NewQuotaError(res.Stderr)
	default:
		return nil, fmt.Errorf("list outputs: guest exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return outputs.ParseListing(res.Stdout, l)
}

// Sink opens where one record's bytes go; done(ok) finishes it, ok saying
// whether the bytes were verified.
type Sink func(outputs.Record) (w io.Writer, done func(ok bool) error, err error)

// Fetch streams the listed files out of the guest in one tar archive and
// hands each, verified, to sink. The archive must hold exactly the records,
// in order, as regular files of their listed sizes.
func Fetch(ctx context.Context, s session.Session, records []outputs.Record, sink Sink) ([]File, error) {
	var names bytes.Buffer
	var budget int64
	for _, r := range records {
		names.WriteString(r.Path)
		names.WriteByte(0)
		budget += r.Size + tarOverhead
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pr, pw := io.Pipe()
	type outcome struct {
		files []File
		err   error
	}
	done := make(chan outcome, 1)
	go func() {
		files, err := readArchive(pr, records, sink)
		if err != nil {
			cancel(err)
		}
		pr.CloseWithError(err) // unblocks the writer below if we stopped early
		done <- outcome{files, err}
	}()
	res, err := s.Shell(ctx, session.Command{Script: tarScript, Args: []string{s.Paths().Outputs}}, session.ShellOptions{
		Stdin:     &names,
		Stdout:    func(p []byte) { _, _ = pw.Write(p) },
		MaxOutput: budget + tarOverhead,
	})
	pw.Close()
	got := <-done
	if got.err != nil {
		return nil, fmt.Errorf("fetch outputs: %w", got.err)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch outputs: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("fetch outputs: guest exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return got.files, nil
}

func readArchive(r io.Reader, records []outputs.Record, sink Sink) ([]File, error) {
	tr := tar.NewReader(r)
	files := make([]File, 0, len(records))
	for _, rec := range records {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: archive ended before %q: %v", outputs.ErrUnsafeOutput, rec.Path, err)
		}
		if h.Name != rec.Path || h.Typeflag != tar.TypeReg || h.Size != rec.Size {
			return nil, fmt.Errorf("%w: expected regular file %q of %d bytes, got %q (type %c, %d bytes)",
				outputs.ErrUnsafeOutput, rec.Path, rec.Size, h.Name, h.Typeflag, h.Size)
		}
		w, finish, err := sink(rec)
		if err != nil {
			return nil, err
		}
		v := outputs.NewVerifier(w, rec)
		_, err = io.Copy(v, tr)
		if err == nil {
			err = v.Finish()
		}
		if ferr := finish(err == nil); err == nil {
			err = ferr
		}
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: rec.Path, Size: rec.Size, SHA256: rec.SHA256, MIMEType: outputs.MIMEType(rec.Path)})
	}
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: archive holds more than the listed files", outputs.ErrUnsafeOutput)
	}
	// Drain the zero blocks so the guest's tar is not killed by a closed pipe.
	_, _ = io.Copy(io.Discard, r)
	return files, nil
}
