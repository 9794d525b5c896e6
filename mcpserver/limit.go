package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MaxMessageBytes bounds one inbound MCP message on every transport, as the
// CLI's tool command bounds its input: a larger message is refused (a
// tools/call with a tool error result, any other request with a JSON-RPC
// error) and the server goes on serving.
const MaxMessageBytes = 64 << 20

// maxEnvelopeValue bounds the "id" and "method" values kept from a message
// that is not kept itself.
const maxEnvelopeValue = 256

// envelopeScanner learns the top-level "id" and "method" of a JSON object
// streamed through Write, keeping nothing else, so that an oversized message
// can be answered without holding it in memory. Keys may come in any order
// (the TypeScript SDK puts id last, after params).
type envelopeScanner struct {
	limit    int64 // the limit the message exceeded, for the refusal's text
	n        int64 // bytes seen
	started  bool  // the first non-space byte was seen
	object   bool  // ... and it was '{'
	depth    int
	inString bool
	escaped  bool

	// At depth 1: whether the next string is a key, the key being read and
	// the value being captured after it.
	wantKey   bool
	inKey     bool
	key       []byte
	capturing bool
	value     []byte
	overflow  bool

	id     json.RawMessage
	method string
}

func (s *envelopeScanner) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	for i := 0; i < len(p); i++ {
		// The bulk of an oversized message is string content below the top
		// level: skip to the next quote or backslash.
		if s.inString && !s.escaped && !s.inKey && (!s.capturing || s.overflow) {
			next := len(p)
			if j := bytes.IndexByte(p[i:], '"'); j >= 0 {
				next = i + j
			}
			if j := bytes.IndexByte(p[i:next], '\\'); j >= 0 {
				next = i + j
			}
			if i = next; i == len(p) {
				break
			}
		}
		s.step(p[i])
	}
	return len(p), nil
}

func (s *envelopeScanner) step(c byte) {
	if !s.started {
		if isSpace(c) {
			return
		}
		s.started, s.object = true, c == '{'
	}
	if !s.object {
		return
	}
	if s.capturing && !(s.depth == 1 && !s.inString && (c == ',' || c == '}')) {
		if len(s.value) < maxEnvelopeValue {
			s.value = append(s.value, c)
		} else {
			s.overflow = true
		}
	}
	if s.inString {
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
			if s.inKey {
				s.inKey = false
				return
			}
		}
		if s.inKey && len(s.key) < maxEnvelopeValue {
			s.key = append(s.key, c)
		}
		return
	}
	switch c {
	case '"':
		s.inString = true
		if s.depth == 1 && s.wantKey {
			s.wantKey, s.inKey, s.key = false, true, s.key[:0]
		}
	case '{', '[':
		s.depth++
		if s.depth == 1 {
			s.wantKey = true
		}
	case '}', ']':
		if s.depth == 1 {
			s.endValue()
		}
		s.depth--
	case ':':
		if s.depth == 1 && (string(s.key) == "id" || string(s.key) == "method") {
			s.capturing, s.value, s.overflow = true, s.value[:0], false
		}
	case ',':
		if s.depth == 1 {
			s.endValue()
			s.wantKey = true
		}
	}
}

// endValue keeps a captured top-level value when its key is id or method.
func (s *envelopeScanner) endValue() {
	if !s.capturing {
		return
	}
	s.capturing = false
	value := bytes.TrimSpace(s.value)
	if s.overflow || !json.Valid(value) {
		return
	}
	switch string(s.key) {
	case "id":
		s.id = append(json.RawMessage(nil), value...)
	case "method":
		_ = json.Unmarshal(value, &s.method)
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// requestID is the scanned id when it is a valid JSON-RPC request id (a
// string or a number), else nil.
func (s *envelopeScanner) requestID() json.RawMessage {
	var v any
	if s.id == nil || json.Unmarshal(s.id, &v) != nil {
		return nil
	}
	switch v.(type) {
	case string, float64:
		return s.id
	}
	return nil
}

// answer is a JSON-RPC response written by this package rather than the
// SDK, whose encoder drops a null id: the spec wants "id": null when the
// request's id could not be read.
type answer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

func errorAnswer(id json.RawMessage, code int64, message string) *answer {
	if id == nil {
		id = json.RawMessage("null")
	}
	return &answer{JSONRPC: "2.0", ID: id, Error: &jsonrpc.Error{Code: code, Message: message}}
}

// refusal answers a message of s.n bytes that exceeded MaxMessageBytes, or
// is nil when there is nothing to answer (a notification). A tools/call gets
// a tool error result, which agents show to the model; any other request a
// JSON-RPC error.
func (s *envelopeScanner) refusal() *answer {
	id := s.requestID()
	switch {
	case id == nil && s.id == nil && s.method != "":
		return nil
	case id != nil && s.method == "tools/call":
		result, _ := json.Marshal(textResult(tooLargeText(s.n, s.limit), true))
		return &answer{JSONRPC: "2.0", ID: id, Result: result}
	}
	return errorAnswer(id, jsonrpc.CodeInvalidRequest, "Invalid Request: "+tooLargeText(s.n, s.limit))
}

func tooLargeText(n, limit int64) string {
	return fmt.Sprintf("Message refused: it is %s, more than the %s an MCP message to this server may carry. "+
		"Send large content in parts (write the first part, then append the rest with bash), "+
		"or upload files with `oma-sandbox upload`.", formatBytes(n), formatBytes(limit))
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
