package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lineTransport is the stdio transport: newline-delimited JSON-RPC, as the
// SDK's, except that a bad line never ends the connection. A line that is
// not JSON gets a parse error (-32700, id null), one that is not a JSON-RPC
// message an invalid-request error, and one longer than maxLine the refusal
// of envelopeScanner; then the next line is served. The SDK's transport
// closes the connection on any of them, and the CLI then removes the
// session. Batches (JSON arrays) are refused: MCP dropped them in 2025-06-18.
type lineTransport struct {
	r       io.ReadCloser
	w       io.WriteCloser
	maxLine int
}

func (t *lineTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &lineConn{w: t.w, r: t.r, incoming: make(chan readResult), closed: make(chan struct{})}
	go c.readLines(bufio.NewReaderSize(t.r, 64<<10), t.maxLine)
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

type lineConn struct {
	r        io.Closer
	incoming chan readResult
	closed   chan struct{}
	once     sync.Once

	mu sync.Mutex // serialises whole lines on w
	w  io.WriteCloser
}

func (c *lineConn) SessionID() string { return "" }

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("marshaling message: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.w.Write(append(data, '\n'))
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe) {
		// The client closed its end: a disconnect, as the end of stdin is,
		// not a failure of the server.
		err = fmt.Errorf("%w: the client stopped reading (%w)", io.EOF, err)
	}
	return err
}

func (c *lineConn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closed)
		err = errors.Join(c.r.Close(), c.w.Close())
	})
	return err
}

// readLines delivers each good line to Read and answers each bad one,
// until the input ends or fails.
func (c *lineConn) readLines(br *bufio.Reader, maxLine int) {
	var line []byte
	var scan *envelopeScanner // set once the line is over maxLine
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case scan != nil:
			_, _ = scan.Write(chunk)
		case len(line)+len(bytes.TrimSuffix(chunk, []byte("\n"))) > maxLine:
			scan = &envelopeScanner{limit: int64(maxLine)}
			_, _ = scan.Write(line)
			_, _ = scan.Write(chunk)
			line = nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		atEnd := err != nil
		if !atEnd || len(line) > 0 || scan != nil {
			var msg jsonrpc.Message
			if scan != nil {
				c.reply(scan.refusal())
			} else {
				msg = c.decode(line)
			}
			if msg != nil && !c.deliver(readResult{msg: msg}) {
				return
			}
		}
		line, scan = line[:0], nil
		if cap(line) > 1<<20 {
			line = nil // do not keep a long line's buffer
		}
		if atEnd {
			c.deliver(readResult{err: err})
			return
		}
	}
}

// decode returns the message on a line, or answers the line and returns nil.
func (c *lineConn) decode(line []byte) jsonrpc.Message {
	line = bytes.TrimSpace(line)
	switch {
	case len(line) == 0:
		return nil
	case !json.Valid(line):
		c.reply(errorAnswer(nil, jsonrpc.CodeParseError, "Parse error: the line is not JSON"))
		return nil
	case line[0] == '[':
		c.reply(errorAnswer(nil, jsonrpc.CodeInvalidRequest, "Invalid Request: JSON-RPC batches are not supported"))
		return nil
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		var scan envelopeScanner
		_, _ = scan.Write(line)
		c.reply(errorAnswer(scan.requestID(), jsonrpc.CodeInvalidRequest, "Invalid Request: "+err.Error()))
		return nil
	}
	return msg
}

// reply writes an answer of this package's own; a failed write means the
// client is gone, which the next read reports.
func (c *lineConn) reply(a *answer) {
	if a == nil {
		return
	}
	data, err := json.Marshal(a)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.w.Write(append(data, '\n'))
}

func (c *lineConn) deliver(r readResult) bool {
	select {
	case c.incoming <- r:
		return true
	case <-c.closed:
		return false
	}
}
