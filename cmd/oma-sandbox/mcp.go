package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/mcpserver"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// mcpCollectTimeout bounds collecting outputs after the server stopped,
// which may be after a signal cancelled everything else.
const mcpCollectTimeout = 2 * time.Minute

// tokenEnv names the environment variable that may hold the HTTP bearer
// token.
const tokenEnv = "OMA_MCP_TOKEN"

func runMCP(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("mcp", "[--backend auto|msb|local] [session create flags] [--attach NAME] [--outputs DIR]\n       [--http 127.0.0.1:PORT [--token-file FILE] [--session-idle-timeout D]]", `Serves one session's agent tools over the Model Context Protocol: on stdin
and stdout by default, or over streamable HTTP at http://ADDR/mcp with
--http. The HTTP endpoint listens on loopback addresses only and requires
"Authorization: Bearer TOKEN" on every request: the token is read from
--token-file (created with a new token when the file does not exist), else
from $OMA_MCP_TOKEN, else generated and printed once on stderr. Requests
naming another Host or coming from another web Origin are refused. A message
over 64 MiB is refused (as a tool error for a tool call) on either
transport, and the server goes on.

The session is created at startup (or attached with --attach) and, when the
client disconnects or SIGINT/SIGTERM arrives, its outputs are collected into
--outputs (when given) and the session is removed (not an attached one, and
not one whose outputs could not all be collected: the command says how to
collect them again). Nothing but the protocol is written to stdout.

Exit status: 0 after a normal stop (disconnect or signal), 1 when the
session or the server failed, 2 on a usage error.`)
	var f createFlags
	f.register(fs)
	attach := fs.String("attach", "", "serve the existing session `NAME` instead of creating one")
	outDir := fs.String("outputs", "", "collect the session's outputs into this host `directory` at the end")
	httpAddr := fs.String("http", "", "serve streamable HTTP on this loopback `address` (127.0.0.1:PORT) instead of stdio")
	tokenFile := fs.String("token-file", "", "with --http: read the bearer token from this `file`, or write a new one there (mode 0600) when it does not exist")
	sessionIdle := fs.Duration("session-idle-timeout", defaultMCPSessionIdle, "with --http: close an MCP session that has had no request for this `duration`, as a client gone without ending it leaves it (the client's next request gets 404 and it starts another); 0 keeps every session")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &usageError{msg: fmt.Sprintf("mcp takes no arguments, got %q", rest), usage: usage(fs)}
	}
	set := setFlags(fs)
	if *attach != "" {
		for _, name := range slices.Concat([]string{"backend", "workspace-id", "session-id"}, sizeFlags, msbOnlyFlags, localOnlyFlags) {
			if set[name] {
				return &usageError{msg: fmt.Sprintf("--%s shapes a new session and cannot go with --attach", name)}
			}
		}
	}
	if *outDir != "" {
		if err := checkDestDir("--outputs", *outDir); err != nil {
			return err
		}
	}
	if *sessionIdle < 0 {
		return &usageError{msg: fmt.Sprintf("--session-idle-timeout %s: want 0 (never) or a positive duration", *sessionIdle)}
	}
	var endpoint *httpEndpoint
	if *httpAddr != "" {
		if endpoint, err = listenMCP(*httpAddr, *tokenFile); err != nil {
			return err
		}
		defer endpoint.ln.Close()
	} else if *tokenFile != "" {
		return &usageError{msg: "--token-file goes with --http"}
	} else if set["session-idle-timeout"] {
		return &usageError{msg: "--session-idle-timeout goes with --http"}
	}

	// Over HTTP the session's, its tool calls' and msb's metrics are served
	// at /metrics.
	var mp metric.MeterProvider
	var metrics http.Handler
	if endpoint != nil {
		var sdk *sdkmetric.MeterProvider
		if sdk, metrics, err = c.newMetrics(ctx); err != nil {
			return err
		}
		defer func() { _ = sdk.Shutdown(context.WithoutCancel(ctx)) }()
		mp = sdk
	}

	var s *omasandbox.Session
	if *attach != "" {
		// Many calls: over the guest agent's channel when the sandbox has it.
		s, err = c.attachSession(ctx, *attach, omasandbox.Options{MeterProvider: mp})
	} else {
		var p *pendingSession
		if p, err = c.resolve(ctx, &f, set); err == nil {
			p.opts.MeterProvider = mp
			s, err = c.create(ctx, p)
		}
	}
	if err != nil {
		return err
	}
	tb := tools.New(s.Sandbox(), tools.Options{Logger: c.logger, MeterProvider: mp, Backend: s.Backend()})
	opts := mcpserver.Options{Toolbox: tb, Name: "oma-sandbox", Version: version(), Logger: c.logger, Metrics: metrics, SessionIdleTimeout: *sessionIdle}
	if endpoint != nil {
		if err = endpoint.announce(c.stderr, s.Name()); err == nil {
			err = mcpserver.ServeHTTP(ctx, endpoint.ln, endpoint.token, opts)
		}
	} else {
		c.logger.Info("serving over MCP on stdio", "session", s.Name())
		err = mcpserver.ServeStdio(ctx, opts)
	}
	if err != nil {
		err = fmt.Errorf("mcp: %w", err)
	}
	return c.finishMCP(ctx, s, *outDir, *attach == "", err)
}

// defaultMCPSessionIdle is how long an MCP session over HTTP may go
// without a request: a day, past any pause of a client still there.
const defaultMCPSessionIdle = 24 * time.Hour

// httpEndpoint is a bound loopback listener and the token it requires.
type httpEndpoint struct {
	ln        net.Listener
	token     string
	source    string // where the token came from, for the announcement
	writeFile string // a file to create with the token, when it did not exist
}

// listenMCP checks --http and the token source and binds the address, all
// before any session exists, so that bad input creates nothing.
func listenMCP(addr, tokenFile string) (*httpEndpoint, error) {
	if _, port, err := net.SplitHostPort(addr); err != nil || !validPort(port) {
		return nil, &usageError{msg: fmt.Sprintf("--http %q: want HOST:PORT with a port from 1 to 65535, such as 127.0.0.1:8765", addr)}
	}
	e, err := resolveToken(tokenFile)
	if err != nil {
		return nil, err
	}
	e.ln, err = mcpserver.ListenHTTP(addr)
	if errors.Is(err, mcpserver.ErrNotLoopback) {
		return nil, &usageError{msg: fmt.Sprintf("--http %q: %v", addr, mcpserver.ErrNotLoopback)}
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// resolveToken finds the bearer token: --token-file's (a new one when the
// file does not exist), else $OMA_MCP_TOKEN, else a new one.
func resolveToken(tokenFile string) (*httpEndpoint, error) {
	if tokenFile == "" {
		token := os.Getenv(tokenEnv)
		if token == "" {
			return &httpEndpoint{token: mcpserver.NewToken(), source: "generated"}, nil
		}
		if err := mcpserver.CheckToken(token); err != nil {
			return nil, &usageError{msg: fmt.Sprintf("$%s: %v", tokenEnv, err)}
		}
		return &httpEndpoint{token: token, source: "from $" + tokenEnv}, nil
	}
	data, err := readPrivateFile(tokenFile)
	if errors.Is(err, fs.ErrNotExist) {
		// The file is written once the server starts; a directory that
		// cannot hold it is refused now, before a session exists.
		if dir, err := os.Stat(filepath.Dir(tokenFile)); err != nil || !dir.IsDir() {
			return nil, &usageError{msg: fmt.Sprintf("--token-file %s: no directory %s to write it in", tokenFile, filepath.Dir(tokenFile))}
		}
		return &httpEndpoint{token: mcpserver.NewToken(), source: "written to " + tokenFile, writeFile: tokenFile}, nil
	}
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("--token-file: %v", err)}
	}
	token := strings.TrimRight(string(data), "\r\n")
	if err := mcpserver.CheckToken(token); err != nil {
		return nil, &usageError{msg: fmt.Sprintf("--token-file %s: %v", tokenFile, err)}
	}
	return &httpEndpoint{token: token, source: "read from " + tokenFile}, nil
}

// readPrivateFile reads a token file, refusing one other users could
// read, replace or have planted: a link, anything but a regular file (a
// FIFO is opened without waiting for a writer), a file of another owner
// than this user, one open to others, one longer than maxTokenFile.
func readPrivateFile(path string) ([]byte, error) {
	if info, err := os.Lstat(path); err != nil {
		return nil, err
	} else if info.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is not a regular file (a symbolic link, not followed)", path)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|tokenOpenFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch uid, known := ownerOf(info); {
	case info.IsDir():
		return nil, fmt.Errorf("%s is a directory, not a regular file", path)
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case known && uid != os.Geteuid():
		return nil, fmt.Errorf("%s is owned by uid %d, not this user (uid %d)", path, uid, os.Geteuid())
	// Windows reports no owner-only modes; its ACLs are the user's to set.
	case runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%s is open to other users (mode %04o); chmod 600 it", path, info.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err == nil && len(data) > maxTokenFile {
		err = fmt.Errorf("%s is longer than %d bytes", path, maxTokenFile)
	}
	return data, err
}

// maxTokenFile is the most a token file may hold.
const maxTokenFile = 4 << 10

// announce writes a new token file if one is due, then says on stderr
// where the server listens and where its token is; a generated token is
// printed there, once.
func (e *httpEndpoint) announce(w io.Writer, name string) error {
	if e.writeFile != "" {
		f, err := os.OpenFile(e.writeFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		_, err = f.WriteString(e.token + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
	}
	fmt.Fprintf(w, "oma-sandbox: serving session %s over MCP at %s\n", name, mcpserver.URL(e.ln))
	if e.source == "generated" {
		fmt.Fprintf(w, "oma-sandbox: bearer token (send \"Authorization: Bearer TOKEN\"): %s\n", e.token)
	} else {
		fmt.Fprintf(w, "oma-sandbox: bearer token %s\n", e.source)
	}
	return nil
}

// finishMCP collects outputs and removes a session the command created,
// whatever stopped the server; the first error wins. A session whose
// outputs were not all collected is kept, so that nothing the agent left is
// lost, unless it is gone already.
func (c *cli) finishMCP(ctx context.Context, s *omasandbox.Session, outDir string, owned bool, err error) error {
	if outDir != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mcpCollectTimeout)
		res, cerr := collect(cctx, s, outDir, transfer.CollectOptions{})
		cancel()
		if cerr == nil {
			for _, f := range res.Files {
				fmt.Fprintf(c.stderr, "oma-sandbox: output %s (%d bytes)\n", textField(f.HostPath), f.Size)
			}
			cerr = c.reportRefused(res)
		}
		if cerr != nil {
			if err == nil {
				err = cerr
			}
			if owned && !errors.Is(cerr, session.ErrGone) {
				fmt.Fprintf(c.stderr, "oma-sandbox: session %[1]s is kept: its outputs were not all collected. "+
					"Collect them with `oma-sandbox outputs %[1]s --dest %[2]s`, then remove it with `oma-sandbox session rm %[1]s`\n",
					s.Name(), shellQuote(outDir))
				return err
			}
		}
	}
	if owned {
		if cerr := closeSession(ctx, s); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+@%,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
