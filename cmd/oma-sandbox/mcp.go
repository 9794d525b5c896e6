package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/oma-sandbox/oma-sandbox/mcpserver"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// mcpCollectTimeout bounds collecting outputs after the server stopped,
// which may be after a signal cancelled everything else.
const mcpCollectTimeout = 2 * time.Minute

func runMCP(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("mcp", "[--backend auto|msb|local] [session create flags] [--attach NAME] [--outputs DIR] [--http 127.0.0.1:PORT]", `Serves one session's agent tools over the Model Context Protocol: on stdin
and stdout by default, or over streamable HTTP at http://ADDR/mcp with
--http (loopback addresses only: the endpoint has no authentication). The
session is created at startup (or attached with --attach) and, when the
client disconnects or SIGINT/SIGTERM arrives, its outputs are collected into
--outputs (when given) and the session is removed (not an attached one).
Nothing but the protocol is written to stdout.

Exit status: 0 after a normal stop (disconnect or signal), 1 when the
session or the server failed, 2 on a usage error.`)
	var f createFlags
	f.register(fs)
	attach := fs.String("attach", "", "serve the existing session `NAME` instead of creating one")
	outDir := fs.String("outputs", "", "collect the session's outputs into this host `directory` at the end")
	httpAddr := fs.String("http", "", "serve streamable HTTP on this loopback `address` (127.0.0.1:PORT) instead of stdio")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &usageError{msg: fmt.Sprintf("mcp takes no arguments, got %q", rest), usage: usage(fs)}
	}
	set := setFlags(fs)
	if *attach != "" {
		for _, name := range append(append([]string{"backend", "workspace-id", "session-id"}, msbOnlyFlags...), localOnlyFlags...) {
			if set[name] {
				return &usageError{msg: fmt.Sprintf("--%s shapes a new session and cannot go with --attach", name)}
			}
		}
	}
	if *httpAddr != "" {
		if _, port, err := net.SplitHostPort(*httpAddr); err != nil || !validPort(port) {
			return &usageError{msg: fmt.Sprintf("--http %q: want HOST:PORT with a port from 1 to 65535, such as 127.0.0.1:8765", *httpAddr)}
		}
	}

	var s session.Session
	if *attach != "" {
		s, err = c.open(ctx, *attach)
	} else {
		var p *pendingSession
		if p, err = c.resolve(ctx, &f, set); err == nil {
			s, err = c.create(ctx, p)
		}
	}
	if err != nil {
		return err
	}
	opts := mcpserver.Options{Toolbox: tools.New(s, tools.Options{Logger: c.logger}), Name: "oma-sandbox", Version: version(), Logger: c.logger}
	if *httpAddr != "" {
		fmt.Fprintf(c.stderr, "oma-sandbox: serving session %s over MCP at http://%s%s\n", s.Name(), *httpAddr, mcpserver.HTTPPath)
		err = mcpserver.ServeHTTP(ctx, *httpAddr, opts)
	} else {
		c.logger.Info("serving over MCP on stdio", "session", s.Name())
		err = mcpserver.ServeStdio(ctx, opts)
	}
	if err != nil {
		err = fmt.Errorf("mcp: %w", err)
	}
	return c.finishMCP(ctx, s, *outDir, *attach == "", err)
}

// finishMCP collects outputs and removes a session the command created,
// whatever stopped the server; the first error wins.
func (c *cli) finishMCP(ctx context.Context, s session.Session, outDir string, owned bool, err error) error {
	if outDir != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mcpCollectTimeout)
		files, cerr := collect(cctx, s, outDir)
		cancel()
		for _, f := range files {
			fmt.Fprintf(c.stderr, "oma-sandbox: output %s (%d bytes)\n", f.HostPath, f.Size)
		}
		if cerr != nil && err == nil {
			err = cerr
		}
	}
	if owned {
		if cerr := closeSession(ctx, s); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
