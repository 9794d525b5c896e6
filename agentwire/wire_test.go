package agentwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	frames := []Frame{
		&Run{ID: 1, Script: []byte("echo \"$1\""), Args: [][]byte{{0xff, 0xfe, '\n'}, []byte("é")}, User: "65534:65534",
			Workdir: "/tmp", TimeoutMS: 1500, MaxOutput: 16 << 20, Stdin: true},
		&Run{ID: 2, MaxOutput: 1},
		&Run{ID: 3, Builtin: "glob-enumerate", Args: [][]byte{[]byte("a")}, MaxOutput: 1},
		&Stdin{ID: 1, Data: bytes.Repeat([]byte{0, 1, 2, 0xff}, MaxChunk/4)},
		&EOF{ID: 1},
		&Kill{ID: 9},
		&Out{ID: 1, FD: 2, Data: []byte{0xc3}},
		&Ack{ID: 1, N: MaxStdinQueue},
		&Exit{ID: 1, Code: 255, TimedOut: true},
		&Exit{ID: 3, Code: 1, Error: "user not found: nobody2"},
		&Hello{Version: 1, PID: 3, Builtins: []string{"glob-enumerate", "write"}},
	}
	for _, f := range frames {
		line, err := Append(nil, f)
		if err != nil {
			t.Fatalf("%#v: %v", f, err)
		}
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("%s: not one line: %q", Type(f), line)
		}
		got, err := Decode(line[:len(line)-1])
		if err != nil {
			t.Fatalf("%s: %v (%s)", Type(f), err, line)
		}
		if !reflect.DeepEqual(got, f) {
			t.Fatalf("round trip of %s: got %#v, want %#v", Type(f), got, f)
		}
	}
}

// Every frame but hello names its call.
func TestCallID(t *testing.T) {
	frames := map[Frame]uint64{
		&Run{ID: 1}: 1, &Stdin{ID: 2}: 2, &EOF{ID: 3}: 3, &Kill{ID: 4}: 4,
		&Out{ID: 5}: 5, &Ack{ID: 6}: 6, &Exit{ID: 7}: 7, &Hello{Version: 1, PID: 8}: 0,
	}
	for f, want := range frames {
		if got := CallID(f); got != want {
			t.Errorf("CallID(%s) = %d, want %d", Type(f), got, want)
		}
	}
}

func TestReaders(t *testing.T) {
	var guest bytes.Buffer
	w := NewWriter(&guest)
	for _, f := range []Frame{&Hello{Version: Version, PID: 7}, &Out{ID: 1, FD: 1, Data: []byte("hi")}, &Exit{ID: 1}} {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	r := NewGuestReader(&guest)
	for _, want := range []string{"hello", "out", "exit"} {
		f, err := r.Read()
		if err != nil || Type(f) != want {
			t.Fatalf("got %v, %v; want a %s frame", f, err, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}

	var host bytes.Buffer
	w = NewWriter(&host)
	big := &Run{ID: 1, Script: bytes.Repeat([]byte("x"), MaxArgBytes), MaxOutput: 1}
	if err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	f, err := NewHostReader(&host).Read()
	if err != nil || !reflect.DeepEqual(f, big) {
		t.Fatalf("a run frame at the argument bound: %v", err)
	}
}

// Every refusal names what was wrong.
func TestRefusals(t *testing.T) {
	long := `{"type":"out","id":1,"fd":1,"data":"` + strings.Repeat("A", MaxGuestLine) + `"}`
	cases := []struct {
		name, stream, want string
		host               bool
	}{
		{"not json", "{\"type\":\"exit\",\"id\":1,\"code\":0\n", "bad frame", false},
		{"missing type", `{"id":1}` + "\n", "missing type", false},
		{"unknown type", `{"type":"boom","id":1}` + "\n", `unknown type "boom"`, false},
		{"unknown field", hello + `{"type":"exit","id":1,"code":0,"extra":2}` + "\n", `unknown field "extra"`, false},
		{"unknown field to guest", `{"type":"kill","id":1,"extra":2}` + "\n", `unknown field "extra"`, true},
		{"trailing data", `{"type":"hello","version":1,"pid":1} {}` + "\n", "after top-level value", false},
		{"missing id", `{"type":"hello","version":1,"pid":1}` + "\n" + `{"type":"exit","code":0}` + "\n", "exit: missing id", false},
		{"bad base64", hello + `{"type":"out","id":1,"fd":1,"data":"!!"}` + "\n", "illegal base64", false},
		{"bad fd", hello + `{"type":"out","id":1,"fd":3,"data":"YQ=="}` + "\n", "fd 3 is neither 1 nor 2", false},
		{"empty out", hello + `{"type":"out","id":1,"fd":1,"data":""}` + "\n", "missing data", false},
		{"big chunk", hello + `{"type":"out","id":1,"fd":1,"data":"` + strings.Repeat("AAAA", MaxChunk/3+1) + `"}` + "\n", "more than 32768", false},
		{"code range", hello + `{"type":"exit","id":1,"code":256}` + "\n", "code 256 is out of range", false},
		{"two outcomes", hello + `{"type":"exit","id":1,"code":1,"timed_out":true,"overflow":true}` + "\n", "more than one of", false},
		{"ack range", hello + `{"type":"ack","id":1,"n":0}` + "\n", "n 0 is out of range", false},
		{"frame before hello", `{"type":"exit","id":1,"code":0}` + "\n", "exit frame before hello", false},
		{"second hello", hello + hello, "a second hello", false},
		{"bad version", `{"type":"hello","version":0,"pid":1}` + "\n", "bad version 0", false},
		{"bad revision", `{"type":"hello","version":1,"pid":1,"revision":-1}` + "\n", "bad revision -1", false},
		{"wrong way", hello + `{"type":"kill","id":1}` + "\n", "kill frame sent the wrong way", false},
		{"overlong line", hello + long + "\n", "frame line too long", false},
		{"overlong unterminated", hello + long, "frame line too long", false},
		{"truncated", hello + `{"type":"exit"`, "stream ended inside a line", false},
		{"empty line", hello + "\n", "empty line", false},
		{"NUL in script", `{"type":"run","id":1,"script":"AGE=","max_output":1}` + "\n", "script contains a NUL byte", true},
		{"NUL in arg", `{"type":"run","id":1,"script":"","args":["YQA="],"max_output":1}` + "\n", "argument 1 contains a NUL byte", true},
		{"relative workdir", `{"type":"run","id":1,"script":"","workdir":"tmp","max_output":1}` + "\n", "not an absolute path", true},
		{"no cap", `{"type":"run","id":1,"script":""}` + "\n", "max_output 0 is not positive", true},
		{"negative timeout", `{"type":"run","id":1,"script":"","timeout_ms":-1,"max_output":1}` + "\n", "timeout_ms -1 is out of range", true},
		{"huge timeout", `{"type":"run","id":1,"script":"","timeout_ms":9223372036854775807,"max_output":1}` + "\n", "is out of range", true},
		{"script and builtin", `{"type":"run","id":1,"script":"dHJ1ZQ==","builtin":"glob-enumerate","max_output":1}` + "\n", "has both a script and a builtin", true},
		{"bad builtin", `{"type":"run","id":1,"builtin":"Glob","max_output":1}` + "\n", `bad builtin name "Glob"`, true},
		{"bad builtin in hello", `{"type":"hello","version":1,"pid":1,"builtins":["ok","no/slash"]}` + "\n", `bad builtin name "no/slash"`, false},
		{"many builtins", `{"type":"hello","version":1,"pid":1,"builtins":[` + strings.Repeat(`"a",`, MaxBuiltins) + `"a"]}` + "\n", "more than 32", false},
		{"hello to guest", hello, "hello frame sent the wrong way", true},
		{"null id", `{"type":"kill","id":null}` + "\n", "kill: missing id", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r *Reader
			if c.host {
				r = NewHostReader(strings.NewReader(c.stream))
			} else {
				r = NewGuestReader(strings.NewReader(c.stream))
			}
			var err error
			for err == nil {
				_, err = r.Read()
			}
			if err == io.EOF || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

const hello = `{"type":"hello","version":1,"pid":1}` + "\n"

// A hello may carry fields a later agent adds: a host reads past them, so
// that an agent newer than the host still opens a channel.
func TestHelloFromANewerAgent(t *testing.T) {
	r := NewGuestReader(strings.NewReader(`{"type":"hello","version":1,"pid":7,"revision":9,"builtins":["ls"],"later":{"a":[1]}}` + "\n"))
	f, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Hello{Version: 1, PID: 7, Revision: 9, Builtins: []string{"ls"}}); !reflect.DeepEqual(f, want) {
		t.Fatalf("got %+v, want %+v", f, want)
	}
}

func TestAppendRefuses(t *testing.T) {
	for _, f := range []Frame{
		&Run{ID: 1, User: "\xff", MaxOutput: 1},
		&Run{ID: 1, Workdir: "/\xff", MaxOutput: 1},
		&Exit{ID: 1, Error: "\xc3"},
		&Out{ID: 1, FD: 1},
		&Run{ID: 1, Script: bytes.Repeat([]byte("x"), MaxArgBytes+1), MaxOutput: 1},
		&Exit{ID: 1, Error: strings.Repeat("e", MaxErrorBytes+1)},
		nil,
	} {
		if b, err := Append(nil, f); err == nil {
			t.Fatalf("Append wrote %q", b)
		}
	}
}

// A reader never buffers past its bound, whatever the line.
func TestReaderBound(t *testing.T) {
	r := NewGuestReader(io.MultiReader(strings.NewReader(hello), endless{}))
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("got %v", err)
	}
	if cap(r.line) > 2*MaxGuestLine {
		t.Fatalf("reader kept %d bytes", cap(r.line))
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// The host parses what a hostile guest writes: any input gives frames or
// an error, never a panic, and every frame it accepts is valid and
// encodes again.
func FuzzGuestReader(f *testing.F) {
	f.Add([]byte(hello + `{"type":"out","id":1,"fd":1,"data":"aGk="}` + "\n" + `{"type":"exit","id":1,"code":0}` + "\n"))
	f.Add([]byte(hello + `{"type":"ack","id":2,"n":5}` + "\n"))
	f.Add([]byte(hello + `{"type":"exit","id":1,"code":1,"error":"x"}` + "\n"))
	f.Add([]byte(`{"type":"hello","version":1,"pid":1,"pid":2}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewGuestReader(bytes.NewReader(data))
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			if err := Validate(fr); err != nil {
				t.Fatalf("accepted an invalid frame: %v", err)
			}
			if FromHost(fr) {
				t.Fatalf("accepted a host frame %s", Type(fr))
			}
			roundTrip(t, fr)
		}
	})
}

// roundTrip checks that an accepted frame encodes, and decodes to a frame
// that encodes the same.
func roundTrip(t *testing.T, fr Frame) {
	line, err := Append(nil, fr)
	if err != nil {
		t.Fatalf("accepted frame does not encode: %v", err)
	}
	again, err := Decode(line[:len(line)-1])
	if err != nil {
		t.Fatalf("re-encoded frame %q refused: %v", line, err)
	}
	if line2, _ := Append(nil, again); !bytes.Equal(line, line2) {
		t.Fatalf("accepted frame changes through a round trip: %q, then %q", line, line2)
	}
}

// The agent parses what the host writes; the same properties hold.
func FuzzHostReader(f *testing.F) {
	f.Add([]byte(`{"type":"run","id":1,"script":"ZWNobw==","args":["YQ=="],"max_output":10,"stdin":true}` + "\n" +
		`{"type":"stdin","id":1,"data":"eA=="}` + "\n" + `{"type":"eof","id":1}` + "\n" + `{"type":"kill","id":1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewHostReader(bytes.NewReader(data))
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			if !FromHost(fr) {
				t.Fatalf("accepted a guest frame %s", Type(fr))
			}
			roundTrip(t, fr)
		}
	})
}

// jsonLine is how encoding/json writes f's line, the reference for the
// frames Append writes by hand.
func jsonLine(t testing.TB, f Frame) []byte {
	var v any
	switch f := f.(type) {
	case *Stdin:
		v = struct {
			Type string `json:"type"`
			Stdin
		}{"stdin", *f}
	case *Out:
		v = struct {
			Type string `json:"type"`
			Out
		}{"out", *f}
	default:
		t.Fatalf("no reference for %T", f)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// The data frames Append writes directly are the lines encoding/json
// writes, and read back as what was sent.
func TestDataFramesAreJSON(t *testing.T) {
	for _, data := range [][]byte{{0}, []byte("a"), []byte("ab"), []byte("abc"), bytes.Repeat([]byte{0xff, '"', '\\', '\n'}, MaxChunk/4)} {
		for _, id := range []uint64{1, 42, 1<<64 - 1} {
			for _, f := range []Frame{&Stdin{ID: id, Data: data}, &Out{ID: id, FD: 1, Data: data}, &Out{ID: id, FD: 2, Data: data}} {
				line, err := Append([]byte("kept"), f)
				if err != nil {
					t.Fatal(err)
				}
				if want := append([]byte("kept"), jsonLine(t, f)...); !bytes.Equal(line, want) {
					t.Fatalf("%T %d bytes: got %.80q, encoding/json writes %.80q", f, len(data), line, want)
				}
			}
		}
	}
}

func FuzzDataFrameEncoding(f *testing.F) {
	f.Add(uint64(1), 1, []byte("x"))
	f.Add(uint64(1<<64-1), 2, []byte{0, 0xff})
	f.Fuzz(func(t *testing.T, id uint64, fd int, data []byte) {
		for _, fr := range []Frame{&Stdin{ID: id, Data: data}, &Out{ID: id, FD: fd, Data: data}} {
			line, err := Append(nil, fr)
			if Validate(fr) != nil {
				if err == nil {
					t.Fatalf("an invalid %T was written", fr)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := jsonLine(t, fr); !bytes.Equal(line, want) {
				t.Fatalf("got %.80q, encoding/json writes %.80q", line, want)
			}
		}
	})
}

// Whatever line the fast decoder of data frames accepts, the general
// decoder decodes to the same frame, or refuses too.
func FuzzDecodeData(f *testing.F) {
	f.Add([]byte(`{"type":"out","id":1,"fd":1,"data":"aGk="}`))
	f.Add([]byte(`{"type":"stdin","id":18446744073709551615,"data":""}`))
	f.Add([]byte(`{"type":"out","id":01,"fd":3,"data":"YR=="}`))
	f.Add([]byte(`{"type":"stdin","id":2,"data":"YQ==YQ=="}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast := decodeData(line)
		if fast == nil {
			return
		}
		slow, err := decodeJSON(line)
		if verr := Validate(fast); verr != nil {
			if err == nil {
				t.Fatalf("%q: the general decoder accepts what the fast one finds invalid (%v)", line, verr)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: the fast decoder accepts what the general one refuses: %v", line, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %#v, general %#v", line, fast, slow)
		}
	})
}
