package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/outputs"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

func runUpload(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("upload", "NAME HOSTPATH [GUESTPATH] [--json] [--max-bytes N]", `Places a host file, or every regular file of a directory tree, in session
NAME at GUESTPATH (default /mnt/session/uploads/<basename of HOSTPATH>).
Under /workspace/skills the files are a skill mount (*/scripts/* executable);
elsewhere they must be under the uploads directory, read-only to the agent.
Each file's size and sha256 are computed on the host and verified before
anything reaches the session; the whole tree goes in one guest command.
Symbolic links and other non-regular files are refused, and so is a tree
larger than --max-bytes (default 1 GiB). Prints one line per
file: GUESTPATH SIZE SHA256 (a path with spaces, quotes, backslashes or
non-printing characters is double-quoted with Go escapes), or with --json an
array of {path, size, sha256}.`)
	asJSON := fs.Bool("json", false, "print the placed files as JSON")
	maxBytes := fs.Int64("max-bytes", transfer.DefaultMaxCallBytes, "refuse an upload larger than this many bytes")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) < 2 || len(rest) > 3 {
		return &usageError{msg: fmt.Sprintf("upload needs NAME HOSTPATH [GUESTPATH], got %q", rest), usage: usage(fs)}
	}
	name, host := rest[0], rest[1]
	files, err := hostFiles(host)
	if err != nil {
		return err
	}
	s, err := c.open(ctx, name)
	if err != nil {
		return err
	}
	paths := s.Paths()
	guest := paths.Uploads + "/" + filepath.Base(filepath.Clean(host))
	if len(rest) == 3 {
		guest = rest[2]
	}
	if !path.IsAbs(guest) {
		return &usageError{msg: fmt.Sprintf("GUESTPATH %q must be an absolute path under %s or %s", guest, paths.Uploads, paths.Skills)}
	}
	guest = path.Clean(guest)
	kind := transfer.Upload
	if guest == paths.Skills || strings.HasPrefix(guest, paths.Skills+"/") {
		kind = transfer.Skill
	}
	mounts := make([]transfer.Mount, len(files))
	for i, f := range files {
		mounts[i] = transfer.Mount{Kind: kind, Path: path.Join(guest, f.rel), Size: f.size, SHA256: f.sha256, Content: f}
	}
	if *maxBytes <= 0 {
		return &usageError{msg: fmt.Sprintf("--max-bytes %d: want a positive number of bytes", *maxBytes)}
	}
	q := &transfer.Quota{Limits: transfer.Limits{PerCall: *maxBytes, PerSession: *maxBytes}}
	err = s.Materialize(ctx, q, mounts)
	for _, f := range files {
		f.close()
	}
	switch {
	case err == nil:
	case interrupted(ctx) != nil:
		return interrupted(ctx)
	case errors.Is(err, transfer.ErrPath), errors.Is(err, transfer.ErrTooLarge):
		return &usageError{msg: fmt.Sprintf("upload %s: %v", host, err)}
	default:
		return fmt.Errorf("upload %s: %w", host, err)
	}
	if *asJSON {
		placed := make([]uploaded, len(mounts))
		for i, m := range mounts {
			placed[i] = uploaded{Path: m.Path, Size: m.Size, SHA256: m.SHA256}
		}
		return writeJSON(c.stdout, placed)
	}
	for _, m := range mounts {
		fmt.Fprintf(c.stdout, "%s %d %s\n", textField(m.Path), m.Size, m.SHA256)
	}
	return nil
}

// uploaded is one placed file in upload's --json output.
type uploaded struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// hostFile is one file to upload; it opens on first Read and closes at
// its end (or first error), so a large tree does not hold a descriptor
// per file.
type hostFile struct {
	path, rel string // rel is "" for a single file, slash-separated below the tree otherwise
	size      int64
	sha256    string
	f         *os.File
	err       error // the error that ended reading, returned again
}

func (h *hostFile) Read(p []byte) (int, error) {
	if h.err != nil {
		return 0, h.err
	}
	if h.f == nil {
		f, err := os.Open(h.path)
		if err != nil {
			h.err = err
			return 0, err
		}
		h.f = f
	}
	n, err := h.f.Read(p)
	if err != nil {
		h.err = err
		h.close()
	}
	return n, err
}

func (h *hostFile) close() {
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
}

// hostFiles lists and hashes the regular files at root (a file or a tree).
func hostFiles(root string) ([]*hostFile, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if fi.Mode().IsRegular() {
		f, err := hashFile(root, "")
		if err != nil {
			return nil, err
		}
		return []*hostFile{f}, nil
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("upload %s: not a regular file or directory", root)
	}
	var out []*hostFile
	// root is the caller's path and may be a symlink to the directory, which
	// WalkDir would report as a link: a trailing separator makes it follow
	// that one link, and no other.
	err = filepath.WalkDir(root+string(filepath.Separator), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("upload %s: %s is not a regular file (%s); only files and directories are uploaded", root, p, d.Type())
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		f, err := hashFile(p, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

func hashFile(p, rel string) (*hostFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return &hostFile{path: p, rel: rel, size: n, sha256: hex.EncodeToString(h.Sum(nil))}, nil
}

func runOutputs(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("outputs", "NAME --dest DIR [--json] [--overwrite] [--allow PATH]...", `Collects the files session NAME left in its outputs directory
(/mnt/session/outputs) into DIR, verifying each file's size and sha256, in
two guest commands. Files are staged inside DIR and moved in only once the
whole fetch verified; a failed collection leaves DIR as it was. An existing
file is never replaced (unless --overwrite) and a symlink in DIR is never
followed. Entries that cannot be collected are refused one by one, each
named on stderr with its reason, and the rest is collected: past the limits
(100 files, 25 MiB per file, 100 MiB in all), not regular files, hard links,
unsafe names, and paths host programs may run (.git, .bashrc, .vscode,
.claude, ...: collect them with --allow PATH). Prints one line per file:
HOSTPATH SIZE SHA256 (a path with spaces, quotes, backslashes or
non-printing characters is double-quoted with Go escapes), or with --json
{files, refused, unlisted, partial}. Exits 1 when anything was refused.`)
	dest := fs.String("dest", "", "host `directory` to write the files into (required)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	var o collectFlags
	o.register(fs)
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		msg := fmt.Sprintf("outputs needs exactly one NAME, got %q", rest)
		if len(rest) == 2 && *dest == "" {
			msg += " (the destination is --dest DIR)"
		}
		return &usageError{msg: msg, usage: usage(fs)}
	}
	if *dest == "" {
		return &usageError{msg: "outputs needs --dest DIR", usage: usage(fs)}
	}
	opts, err := o.options()
	if err != nil {
		return err
	}
	s, err := c.open(ctx, rest[0])
	if err != nil {
		return err
	}
	res, err := collect(ctx, s, *dest, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(c.stdout, res); err != nil {
			return err
		}
	} else {
		for _, f := range res.Files {
			fmt.Fprintf(c.stdout, "%s %d %s\n", textField(f.HostPath), f.Size, f.SHA256)
		}
	}
	return c.reportRefused(res)
}

// checkDestDir refuses a collection directory that cannot be one: an
// existing file, or a path below one. The collection itself would find it
// only after the session ran, and then keep the session.
func checkDestDir(flag, dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			return nil
		case err == nil && p == filepath.Clean(dir):
			return &usageError{msg: fmt.Sprintf("%s %s: not a directory", flag, dir)}
		case err == nil:
			return &usageError{msg: fmt.Sprintf("%s %s: %s is not a directory", flag, dir, p)}
		case p == filepath.Dir(p):
			return nil
		}
	}
}

// collectFlags are the options of output collection that outputs and run
// share.
type collectFlags struct {
	overwrite bool
	allow     stringList
}

func (f *collectFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace existing files in the destination")
	fs.Var(&f.allow, "allow", "collect this output `PATH` (and what is below it) although host programs may run it, such as .git or .bashrc; repeatable. "+
		"A network target (HOST:PORT, an IP, a CIDR, *.domain) is refused: that is --allow-net")
}

func (f *collectFlags) options() (transfer.CollectOptions, error) {
	o := transfer.CollectOptions{Overwrite: f.overwrite, Allow: f.allow}
	for _, a := range f.allow {
		if netTarget(a) {
			return o, &usageError{msg: fmt.Sprintf("--allow %s: looks like a network target, but --allow names an output path to collect (such as .git); "+
				"a session's network destinations are given with --allow-net", a)}
		}
	}
	if err := (outputs.Policy{Allow: f.allow}).CheckAllow(); err != nil {
		return o, &usageError{msg: "--allow: " + err.Error()}
	}
	return o, nil
}

// hostName is a host name as written before :PORT (localhost, db-1).
var hostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]*$`)

// netTarget reports whether an --allow value is written as a network
// destination: host:port, an IP address, a CIDR, *.domain or a URL. A bare
// domain is not one, since file names (report.txt) read as domains too. No
// path --allow is useful for has that shape: each holds a segment such as
// .git, which starts with a dot.
func netTarget(v string) bool {
	if t, err := egress.ParseTarget(v); err == nil {
		return t.Port != 0 || t.Prefix.IsValid() || t.Suffix
	}
	if _, err := netip.ParsePrefix(v); err == nil { // IPv6 without brackets
		return true
	}
	if _, err := netip.ParseAddr(v); err == nil {
		return true
	}
	if strings.Contains(v, "://") {
		return true
	}
	host, port, ok := strings.Cut(v, ":") // localhost:8080, db:5432
	n, err := strconv.ParseUint(port, 10, 16)
	return ok && hostName.MatchString(host) && err == nil && n > 0
}

// reportRefused names each refused entry on stderr and makes a partial
// collection an error.
func (c *cli) reportRefused(res *transfer.Result) error {
	for _, r := range res.Refused {
		fmt.Fprintf(c.stderr, "oma-sandbox: refused %s: %s\n", textField(r.Path), r.Reason)
	}
	if res.Unlisted > 0 {
		fmt.Fprintf(c.stderr, "oma-sandbox: refused %d more entries without naming them\n", res.Unlisted)
	}
	if res.Partial {
		return fmt.Errorf("collection was partial: %d entries refused", len(res.Refused)+res.Unlisted)
	}
	return nil
}

func collect(ctx context.Context, s *omasandbox.Session, dest string, o transfer.CollectOptions) (*transfer.Result, error) {
	res, err := s.CollectOutputs(ctx, dest, o)
	if err != nil {
		if sig := interrupted(ctx); sig != nil {
			return nil, sig
		}
		return nil, fmt.Errorf("collect outputs of %s: %w", s.Name(), err)
	}
	return res, nil
}

// printable is s as it is when every rune of it prints, else quoted: a
// note may carry a guest's bytes (a destination it asked for), which must
// not reach a terminal raw.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// textField writes a path as one unambiguous field of a text line: as it is
// when it has only printable characters other than space, quote and
// backslash, else double-quoted with Go escapes.
func textField(s string) string {
	for _, r := range s {
		if r == ' ' || r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	if s == "" || !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	return s
}
