package otlpexport

import (
	"encoding/binary"
	"errors"
	"math"
)

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// encoder appends protobuf's binary encoding to b.
//
// The field methods leave a zero value out, as proto3 does for a field
// without presence; a oneof member or an optional field is written with
// tag and a raw method, since its presence is what it says.
type encoder struct {
	b []byte
}

func (e *encoder) tag(num, wire int) { e.uvarint(uint64(num)<<3 | uint64(wire)) }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

func (e *encoder) le64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) varintField(num int, v uint64) {
	if v != 0 {
		e.tag(num, wireVarint)
		e.uvarint(v)
	}
}

func (e *encoder) boolField(num int, v bool) {
	if v {
		e.varintField(num, 1)
	}
}

// zigzagField is a sint32 field.
func (e *encoder) zigzagField(num int, v int32) {
	e.varintField(num, uint64(uint32(v<<1)^uint32(v>>31)))
}

func (e *encoder) fixed64Field(num int, v uint64) {
	if v != 0 {
		e.tag(num, wireFixed64)
		e.le64(v)
	}
}

func (e *encoder) fixed32Field(num int, v uint32) {
	if v != 0 {
		e.tag(num, wireFixed32)
		e.b = binary.LittleEndian.AppendUint32(e.b, v)
	}
}

// doubleField leaves out +0 only: -0 has bits, and protobuf sends it.
func (e *encoder) doubleField(num int, v float64) {
	e.fixed64Field(num, math.Float64bits(v))
}

// double is an optional or oneof double, sent whatever its value.
func (e *encoder) double(num int, v float64) {
	e.tag(num, wireFixed64)
	e.le64(math.Float64bits(v))
}

func (e *encoder) stringField(num int, s string) {
	if s != "" {
		e.tag(num, wireBytes)
		e.str(s)
	}
}

func (e *encoder) bytesField(num int, b []byte) {
	if len(b) > 0 {
		e.tag(num, wireBytes)
		e.str(string(b))
	}
}

func (e *encoder) packedFixed64(num int, vs []uint64) {
	if len(vs) == 0 {
		return
	}
	e.tag(num, wireBytes)
	e.uvarint(uint64(8 * len(vs)))
	for _, v := range vs {
		e.le64(v)
	}
}

func (e *encoder) packedDouble(num int, vs []float64) {
	if len(vs) == 0 {
		return
	}
	e.tag(num, wireBytes)
	e.uvarint(uint64(8 * len(vs)))
	for _, v := range vs {
		e.le64(math.Float64bits(v))
	}
}

func (e *encoder) packedVarint(num int, vs []uint64) {
	if len(vs) == 0 {
		return
	}
	m := e.begin(num)
	for _, v := range vs {
		e.uvarint(v)
	}
	e.end(m)
}

// begin starts the length-delimited field num (a message, always sent:
// an empty one is present); end, given what begin returned, writes its
// length once its contents are appended. One byte is reserved for the
// length, the contents moved up for a longer one.
func (e *encoder) begin(num int) int {
	e.tag(num, wireBytes)
	e.b = append(e.b, 0)
	return len(e.b)
}

func (e *encoder) end(start int) {
	n := len(e.b) - start
	if n < 0x80 {
		e.b[start-1] = byte(n)
		return
	}
	var l [binary.MaxVarintLen64]byte
	ln := binary.PutUvarint(l[:], uint64(n))
	e.b = append(e.b, l[1:ln]...) // room for the longer length
	copy(e.b[start-1+ln:], e.b[start:start+n])
	copy(e.b[start-1:], l[:ln])
}

var errMalformed = errors.New("malformed protobuf")

// eachField calls fn with each field of the message b: its number, wire
// type, and its value (varint) or contents (length-delimited); fixed
// fields and groups (a newer collector's unknown fields may be either)
// are skipped.
func eachField(b []byte, fn func(num, wire int, v uint64, data []byte)) error {
	for len(b) > 0 {
		num, wire, v, data, n, err := nextField(b)
		if err != nil {
			return err
		}
		if wire == wireEndGroup {
			return errMalformed // no group is open
		}
		if wire != wireStartGroup {
			fn(num, wire, v, data)
		} else if n, err = skipGroup(b, n, num, 1); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Group delimiters: a deprecated encoding of messages, which a reader must
// still skip.
const (
	wireStartGroup = 3
	wireEndGroup   = 4
)

// nextField reads the field at the start of b: n is its length (a group's
// start tag alone).
func nextField(b []byte) (num, wire int, v uint64, data []byte, n int, err error) {
	t, n := binary.Uvarint(b)
	if n <= 0 || t>>3 == 0 || t>>3 > math.MaxInt32 {
		return 0, 0, 0, nil, 0, errMalformed
	}
	num, wire = int(t>>3), int(t&7)
	rest := b[n:]
	var m int
	switch wire {
	case wireVarint:
		if v, m = binary.Uvarint(rest); m <= 0 {
			return 0, 0, 0, nil, 0, errMalformed
		}
	case wireFixed64:
		m = 8
	case wireFixed32:
		m = 4
	case wireBytes:
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return 0, 0, 0, nil, 0, errMalformed
		}
		data, m = rest[k:k+int(l)], k+int(l)
	case wireStartGroup, wireEndGroup:
	default:
		return 0, 0, 0, nil, 0, errMalformed
	}
	if m > len(rest) {
		return 0, 0, 0, nil, 0, errMalformed
	}
	return num, wire, v, data, n + m, nil
}

// maxGroupDepth bounds the groups nested in a response, as protobuf's own
// decoder bounds a message's depth (more deeply, at 10,000).
const maxGroupDepth = 100

// skipGroup returns the length of b up to the end of the group numbered
// num whose start tag b[:n] holds, groups nested in it included; depth is
// how deep that group is.
func skipGroup(b []byte, n, num, depth int) (int, error) {
	if depth > maxGroupDepth {
		return 0, errMalformed
	}
	for n < len(b) {
		inner, wire, _, _, m, err := nextField(b[n:])
		if err != nil {
			return 0, err
		}
		switch wire {
		case wireEndGroup:
			if inner != num {
				return 0, errMalformed
			}
			return n + m, nil
		case wireStartGroup:
			if m, err = skipGroup(b[n:], m, inner, depth+1); err != nil {
				return 0, err
			}
		}
		n += m
	}
	return 0, errMalformed
}
