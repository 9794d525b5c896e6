package agentwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrLineTooLong is returned for a line longer than the reader's bound.
var ErrLineTooLong = errors.New("frame line too long")

// Reader reads frames going one way, at most max bytes a line, and never
// buffers more than that.
type Reader struct {
	br        *bufio.Reader
	max       int
	line      []byte
	fromGuest bool
	sawHello  bool
}

// NewGuestReader reads what the agent writes (the host's side): a hello
// first and only once, then out, ack and exit frames, each line at most
// MaxGuestLine bytes.
func NewGuestReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 16<<10), max: MaxGuestLine, fromGuest: true}
}

// NewHostReader reads what the host writes (the agent's side): run, stdin,
// eof and kill frames, each line at most MaxHostLine bytes.
func NewHostReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: MaxHostLine}
}

// Read returns the next frame, io.EOF at a clean end of the stream, or an
// error naming what was wrong with the line. After an error other than
// io.EOF the stream is out of step and should be abandoned.
func (r *Reader) Read() (Frame, error) {
	line, err := r.readLine()
	if err != nil {
		return nil, err
	}
	f, err := Decode(line)
	if err != nil {
		return nil, err
	}
	if FromHost(f) == r.fromGuest {
		return nil, fmt.Errorf("bad frame: %s frame sent the wrong way", Type(f))
	}
	if r.fromGuest {
		_, hello := f.(*Hello)
		switch {
		case !r.sawHello && !hello:
			return nil, fmt.Errorf("bad frame: %s frame before hello", Type(f))
		case r.sawHello && hello:
			return nil, errors.New("bad frame: a second hello")
		}
		r.sawHello = true
	}
	return f, nil
}

// readLine returns the next line without its newline; the slice is valid
// until the next call.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(r.line)+len(chunk) > r.max {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, r.max)
		}
		r.line = append(r.line, chunk...)
		switch {
		case err == nil:
			line := r.line[:len(r.line)-1]
			if len(line) == 0 {
				return nil, errors.New("bad frame: empty line")
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.line) == 0:
			return nil, io.EOF
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("bad frame: stream ended inside a line (%d bytes)", len(r.line))
		default:
			return nil, err
		}
	}
}

// Writer writes frames; it does not serialize concurrent callers.
type Writer struct {
	w   io.Writer
	buf []byte
}

// NewWriter writes frames to w, one Write call a frame.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write validates f and writes its line.
func (w *Writer) Write(f Frame) error {
	b, err := Append(w.buf[:0], f)
	if err != nil {
		return err
	}
	w.buf = b
	if len(b) > 1<<20 {
		w.buf = nil // do not keep a large run frame's buffer
	}
	_, err = w.w.Write(b)
	return err
}
