// Package agentwire defines the frames the host and the in-guest agent
// (oma-guest-agent) exchange over the agent's stdin and stdout: JSON lines,
// one object a line, with every byte payload in base64.
//
// Decoding is strict and bounded because each end treats the other as
// hostile: a line longer than the reader's bound, an unknown type or field,
// a missing id, bad base64, an out-of-range value or a frame going the
// wrong way is an error that names what was wrong. docs/guest-agent.md
// describes the protocol.
package agentwire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Version is the protocol version the agent announces in its hello.
const Version = 1

// Revision is the agent's revision, which it announces in its hello: raised
// with each change of the agent that a sandbox made by an older program
// must receive (a fix of a builtin). A host replaces an agent of a lower
// revision with its own, and never one of a higher; an agent older than
// revisions announces none (0). guestagent's TestRevisionFollowsTheAgent
// stops a change of the agent's sources that did not consider it.
const Revision = 4

// Bounds of the protocol. A guest's frames are small (an out chunk of
// MaxChunk bytes is about 44 KiB of JSON); a run frame carries a script and
// arguments up to the kernel's own limit on argv (ARG_MAX, 2 MiB with the
// default stack limit), so the host's frames may be longer.
const (
	MaxChunk      = 32 << 10 // raw bytes in one out or stdin frame
	MaxGuestLine  = 64 << 10 // a line the guest writes, newline included
	MaxHostLine   = 4 << 20  // a line the host writes, newline included
	MaxArgBytes   = 2 << 20  // script plus arguments in one run frame
	MaxErrorBytes = 1 << 10  // an exit frame's error text
	MaxUserBytes  = 256      // a run frame's user
	MaxPathBytes  = 4096     // a run frame's workdir (PATH_MAX)
	MaxStdinQueue = 256 << 10
	MaxTimeoutMS  = 1 << 40 // about 35 years: far below time.Duration's range
	MaxBuiltins   = 32      // names in a hello's builtins
	MaxNameBytes  = 64      // one builtin's name
)

// Frame is one message; its concrete type is one of the pointer types
// below.
type Frame interface{ frameType() string }

// Frames the host sends.
type (
	// Run starts `/bin/bash -c Script bash Args...` as call ID, or, when
	// Builtin is set, has the agent run that builtin itself.
	Run struct {
		ID uint64 `json:"id"`
		// Script and Args are bytes (base64 on the wire): any bytes but NUL.
		Script []byte   `json:"script,omitempty"`
		Args   [][]byte `json:"args,omitempty"`
		// Builtin names one of the hello's builtins: the agent runs it with
		// Args and stdin, and Script stays empty.
		Builtin string `json:"builtin,omitempty"`
		// User is "" (the agent's default user), a name or a numeric uid,
		// optionally followed by ":group".
		User string `json:"user,omitempty"`
		// Workdir is "" (/workspace) or an absolute path.
		Workdir   string `json:"workdir,omitempty"`
		TimeoutMS int64  `json:"timeout_ms,omitempty"` // 0: no guest timer
		MaxOutput int64  `json:"max_output"`           // stdout+stderr cap, > 0
		// Stdin says stdin and eof frames follow; without it the command's
		// stdin is empty.
		Stdin bool `json:"stdin,omitempty"`
	}
	// Stdin is the next piece of a call's stdin. The host keeps at most
	// MaxStdinQueue bytes sent but not yet acknowledged by an Ack.
	Stdin struct {
		ID   uint64 `json:"id"`
		Data []byte `json:"data"`
	}
	// EOF ends a call's stdin.
	EOF struct {
		ID uint64 `json:"id"`
	}
	// Kill kills a call's whole process tree; the agent still answers Exit.
	Kill struct {
		ID uint64 `json:"id"`
	}
)

// Frames the guest sends.
type (
	// Hello is the agent's first line, sent once.
	Hello struct {
		Version int `json:"version"`
		PID     int `json:"pid"`
		// Revision is the agent's (the constant Revision of its build).
		Revision int `json:"revision,omitempty"`
		// Builtins are the names a run frame may give as its builtin.
		Builtins []string `json:"builtins,omitempty"`
	}
	// Out is a chunk of a call's stdout (FD 1) or stderr (FD 2).
	Out struct {
		ID   uint64 `json:"id"`
		FD   int    `json:"fd"`
		Data []byte `json:"data"`
	}
	// Ack says N more bytes of a call's stdin left the agent's queue.
	Ack struct {
		ID uint64 `json:"id"`
		N  int64  `json:"n"`
	}
	// Exit ends a call. Error is set when the command could not start (an
	// unknown user...); TimedOut when the guest timer killed it; Overflow
	// when its output passed MaxOutput. A command killed by a signal
	// reports code 255, as msb does.
	Exit struct {
		ID       uint64 `json:"id"`
		Code     int    `json:"code"`
		TimedOut bool   `json:"timed_out,omitempty"`
		Overflow bool   `json:"overflow,omitempty"`
		Error    string `json:"error,omitempty"`
	}
)

func (*Run) frameType() string   { return "run" }
func (*Stdin) frameType() string { return "stdin" }
func (*EOF) frameType() string   { return "eof" }
func (*Kill) frameType() string  { return "kill" }
func (*Hello) frameType() string { return "hello" }
func (*Out) frameType() string   { return "out" }
func (*Ack) frameType() string   { return "ack" }
func (*Exit) frameType() string  { return "exit" }

// Type names f's type as it appears on the wire.
func Type(f Frame) string { return f.frameType() }

// CallID is the call f belongs to: its ID, or 0 for a hello, which
// belongs to none.
func CallID(f Frame) uint64 {
	switch f := f.(type) {
	case *Run:
		return f.ID
	case *Stdin:
		return f.ID
	case *EOF:
		return f.ID
	case *Kill:
		return f.ID
	case *Out:
		return f.ID
	case *Ack:
		return f.ID
	case *Exit:
		return f.ID
	}
	return 0
}

// FromHost tells whether frames of f's type travel from host to guest.
func FromHost(f Frame) bool {
	switch f.(type) {
	case *Run, *Stdin, *EOF, *Kill:
		return true
	}
	return false
}

// Validate checks f against the protocol's rules.
func Validate(f Frame) error {
	switch f := f.(type) {
	case *Run:
		if f.ID == 0 {
			return errors.New("run: missing id")
		}
		n := len(f.Script)
		if f.Builtin != "" && !validName(f.Builtin) {
			return fmt.Errorf("run %d: bad builtin name %.64q", f.ID, f.Builtin)
		}
		if f.Builtin != "" && len(f.Script) > 0 {
			return fmt.Errorf("run %d: has both a script and a builtin", f.ID)
		}
		if bytes.IndexByte(f.Script, 0) >= 0 {
			return fmt.Errorf("run %d: script contains a NUL byte", f.ID)
		}
		for i, a := range f.Args {
			if bytes.IndexByte(a, 0) >= 0 {
				return fmt.Errorf("run %d: argument %d contains a NUL byte", f.ID, i+1)
			}
			n += len(a)
		}
		if n > MaxArgBytes {
			return fmt.Errorf("run %d: script and arguments are %d bytes, more than %d", f.ID, n, MaxArgBytes)
		}
		if len(f.User) > MaxUserBytes || !cleanText(f.User) {
			return fmt.Errorf("run %d: bad user %.64q", f.ID, f.User)
		}
		if f.Workdir != "" && (!path.IsAbs(f.Workdir) || len(f.Workdir) > MaxPathBytes || !cleanText(f.Workdir)) {
			return fmt.Errorf("run %d: workdir %.64q is not an absolute path in UTF-8", f.ID, f.Workdir)
		}
		if f.TimeoutMS < 0 || f.TimeoutMS > MaxTimeoutMS {
			return fmt.Errorf("run %d: timeout_ms %d is out of range", f.ID, f.TimeoutMS)
		}
		if f.MaxOutput <= 0 {
			return fmt.Errorf("run %d: max_output %d is not positive", f.ID, f.MaxOutput)
		}
	case *Stdin:
		if f.ID == 0 {
			return errors.New("stdin: missing id")
		}
		if err := checkChunk(f.Data); err != nil {
			return fmt.Errorf("stdin %d: %w", f.ID, err)
		}
	case *EOF:
		if f.ID == 0 {
			return errors.New("eof: missing id")
		}
	case *Kill:
		if f.ID == 0 {
			return errors.New("kill: missing id")
		}
	case *Hello:
		if f.Version <= 0 {
			return fmt.Errorf("hello: bad version %d", f.Version)
		}
		if f.PID <= 0 {
			return fmt.Errorf("hello: bad pid %d", f.PID)
		}
		if f.Revision < 0 {
			return fmt.Errorf("hello: bad revision %d", f.Revision)
		}
		if len(f.Builtins) > MaxBuiltins {
			return fmt.Errorf("hello: %d builtins, more than %d", len(f.Builtins), MaxBuiltins)
		}
		for _, name := range f.Builtins {
			if !validName(name) {
				return fmt.Errorf("hello: bad builtin name %.64q", name)
			}
		}
	case *Out:
		if f.ID == 0 {
			return errors.New("out: missing id")
		}
		if f.FD != 1 && f.FD != 2 {
			return fmt.Errorf("out %d: fd %d is neither 1 nor 2", f.ID, f.FD)
		}
		if err := checkChunk(f.Data); err != nil {
			return fmt.Errorf("out %d: %w", f.ID, err)
		}
	case *Ack:
		if f.ID == 0 {
			return errors.New("ack: missing id")
		}
		if f.N <= 0 || f.N > MaxStdinQueue {
			return fmt.Errorf("ack %d: n %d is out of range", f.ID, f.N)
		}
	case *Exit:
		if f.ID == 0 {
			return errors.New("exit: missing id")
		}
		if f.Code < 0 || f.Code > 255 {
			return fmt.Errorf("exit %d: code %d is out of range", f.ID, f.Code)
		}
		if len(f.Error) > MaxErrorBytes {
			return fmt.Errorf("exit %d: error text is %d bytes, more than %d", f.ID, len(f.Error), MaxErrorBytes)
		}
		if !utf8.ValidString(f.Error) {
			return fmt.Errorf("exit %d: error text is not UTF-8", f.ID)
		}
		if n := btoi(f.TimedOut) + btoi(f.Overflow) + btoi(f.Error != ""); n > 1 {
			return fmt.Errorf("exit %d: more than one of timed_out, overflow and error", f.ID)
		}
	case nil:
		return errors.New("nil frame")
	default:
		return fmt.Errorf("unknown frame %T", f)
	}
	return nil
}

func checkChunk(data []byte) error {
	if len(data) == 0 {
		return errors.New("missing data")
	}
	if len(data) > MaxChunk {
		return fmt.Errorf("%d bytes of data, more than %d", len(data), MaxChunk)
	}
	return nil
}

// validName tells whether s can name a builtin: 1 to MaxNameBytes
// lower-case letters, digits and dashes.
func validName(s string) bool {
	if s == "" || len(s) > MaxNameBytes {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// cleanText tells whether s survives JSON unchanged (valid UTF-8) and
// holds no NUL byte.
func cleanText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendData appends a data frame's line: head, the id, the fields
// between id and data (already encoded), then the data in base64. A
// validated chunk keeps the line far below either direction's bound.
func appendData(dst []byte, head string, id uint64, middle string, data []byte) []byte {
	dst = slices.Grow(dst, len(head)+20+len(middle)+len(`,"data":""}`)+base64.StdEncoding.EncodedLen(len(data))+1)
	dst = append(dst, head...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, middle...)
	dst = append(dst, `,"data":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	return append(dst, "\"}\n"...)
}

// Append validates f and appends its line, newline included, to dst.
func Append(dst []byte, f Frame) ([]byte, error) {
	if err := Validate(f); err != nil {
		return dst, err
	}
	var v any
	switch f := f.(type) {
	case *Stdin:
		// The frames that carry bytes, most of a channel's traffic, are
		// written directly: the same line encoding/json writes, without
		// its intermediate copies.
		return appendData(dst, `{"type":"stdin","id":`, f.ID, "", f.Data), nil
	case *Out:
		return appendData(dst, `{"type":"out","id":`, f.ID, `,"fd":`+strconv.Itoa(f.FD), f.Data), nil
	case *Run:
		v = struct {
			Type string `json:"type"`
			Run
		}{"run", *f}
	case *EOF:
		v = struct {
			Type string `json:"type"`
			EOF
		}{"eof", *f}
	case *Kill:
		v = struct {
			Type string `json:"type"`
			Kill
		}{"kill", *f}
	case *Hello:
		v = struct {
			Type string `json:"type"`
			Hello
		}{"hello", *f}
	case *Ack:
		v = struct {
			Type string `json:"type"`
			Ack
		}{"ack", *f}
	case *Exit:
		v = struct {
			Type string `json:"type"`
			Exit
		}{"exit", *f}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	limit := MaxGuestLine
	if FromHost(f) {
		limit = MaxHostLine
	}
	if len(b)+1 > limit {
		return dst, fmt.Errorf("%s frame of %d bytes is longer than %d", Type(f), len(b)+1, limit)
	}
	return append(append(dst, b...), '\n'), nil
}

// Decode parses one line (without its newline) into a valid frame.
func Decode(line []byte) (Frame, error) {
	if f := decodeData(line); f != nil {
		if err := Validate(f); err != nil {
			return nil, fmt.Errorf("bad frame: %w", err)
		}
		return f, nil
	}
	return decodeJSON(line)
}

// decodeData parses the line of an out or stdin frame laid out exactly as
// Append writes it, without encoding/json's copies of the line and its
// data (these frames are most of a channel's bytes); nil means the line
// is not in that layout and the general decoder must judge it. Whatever
// it accepts, decodeJSON decodes to the same frame (FuzzDecodeData).
func decodeData(line []byte) Frame {
	var f Frame
	var id *uint64
	var fd *int
	rest, ok := bytes.CutPrefix(line, []byte(`{"type":"out","id":`))
	if ok {
		out := &Out{}
		f, id, fd = out, &out.ID, &out.FD
	} else if rest, ok = bytes.CutPrefix(line, []byte(`{"type":"stdin","id":`)); ok {
		in := &Stdin{}
		f, id = in, &in.ID
	} else {
		return nil
	}
	n, rest, ok := cutUint(rest)
	if !ok {
		return nil
	}
	*id = n
	if fd != nil {
		if rest, ok = bytes.CutPrefix(rest, []byte(`,"fd":`)); !ok {
			return nil
		}
		if n, rest, ok = cutUint(rest); !ok || n > 2 {
			return nil
		}
		*fd = int(n)
	}
	enc, ok := bytes.CutPrefix(rest, []byte(`,"data":"`))
	if !ok {
		return nil
	}
	if enc, ok = bytes.CutSuffix(enc, []byte(`"}`)); !ok {
		return nil
	}
	for _, c := range enc {
		if !isBase64(c) {
			return nil
		}
	}
	data, err := base64.StdEncoding.AppendDecode(make([]byte, 0, base64.StdEncoding.DecodedLen(len(enc))), enc)
	if err != nil {
		return nil
	}
	switch f := f.(type) {
	case *Out:
		f.Data = data
	case *Stdin:
		f.Data = data
	}
	return f
}

// cutUint parses the JSON number of an unsigned integer at the start of b.
func cutUint(b []byte) (uint64, []byte, bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || (i > 1 && b[0] == '0') {
		return 0, nil, false
	}
	n, err := strconv.ParseUint(string(b[:i]), 10, 64)
	return n, b[i:], err == nil
}

func isBase64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
}

// decodeJSON is Decode for any line encoding/json accepts.
func decodeJSON(line []byte) (Frame, error) {
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return nil, fmt.Errorf("bad frame: %w", err)
	}
	if head.Type == nil {
		return nil, errors.New("bad frame: missing type")
	}
	var f Frame
	var err error
	switch *head.Type {
	case "run":
		var v struct {
			Type string `json:"type"`
			Run
		}
		err, f = strict(line, &v), &v.Run
	case "stdin":
		var v struct {
			Type string `json:"type"`
			Stdin
		}
		err, f = strict(line, &v), &v.Stdin
	case "eof":
		var v struct {
			Type string `json:"type"`
			EOF
		}
		err, f = strict(line, &v), &v.EOF
	case "kill":
		var v struct {
			Type string `json:"type"`
			Kill
		}
		err, f = strict(line, &v), &v.Kill
	case "hello":
		var v struct {
			Type string `json:"type"`
			Hello
		}
		// The one frame read past fields it does not know: a later
		// agent's hello may add some, and a host older than that agent
		// must still open a channel to it.
		err, f = json.Unmarshal(line, &v), &v.Hello
	case "out":
		var v struct {
			Type string `json:"type"`
			Out
		}
		err, f = strict(line, &v), &v.Out
	case "ack":
		var v struct {
			Type string `json:"type"`
			Ack
		}
		err, f = strict(line, &v), &v.Ack
	case "exit":
		var v struct {
			Type string `json:"type"`
			Exit
		}
		err, f = strict(line, &v), &v.Exit
	default:
		return nil, fmt.Errorf("bad frame: unknown type %.32q", *head.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("bad %s frame: %w", *head.Type, err)
	}
	if err := Validate(f); err != nil {
		return nil, fmt.Errorf("bad frame: %w", err)
	}
	return f, nil
}

// strict decodes line into v refusing unknown fields (Decode's first pass
// already refused anything after the object).
func strict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
