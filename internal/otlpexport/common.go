package otlpexport

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Messages of opentelemetry/proto/common/v1 and resource/v1.

// keyValue writes kv as the KeyValue field num.
func (e *encoder) keyValue(num int, kv attribute.KeyValue) {
	m := e.begin(num)
	e.stringField(1, string(kv.Key))
	e.anyValue(2, kv.Value)
	e.end(m)
}

func (e *encoder) keyValues(num int, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		e.keyValue(num, kv)
	}
}

func (e *encoder) attributeSet(num int, s *attribute.Set) {
	for it := s.Iter(); it.Next(); {
		e.keyValue(num, it.Attribute())
	}
}

// anyValue writes v as the AnyValue field num: its oneof member is sent
// even when zero; an EMPTY value is an AnyValue with none set.
func (e *encoder) anyValue(num int, v attribute.Value) {
	m := e.begin(num)
	switch v.Type() {
	case attribute.EMPTY:
	case attribute.STRING:
		e.tag(1, wireBytes)
		e.str(v.AsString())
	case attribute.BOOL:
		e.tag(2, wireVarint)
		e.uvarint(boolBit(v.AsBool()))
	case attribute.INT64:
		e.tag(3, wireVarint)
		e.uvarint(uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.double(4, v.AsFloat64())
	case attribute.BYTESLICE:
		e.tag(7, wireBytes)
		e.str(string(v.AsByteSlice()))
	case attribute.MAP:
		l := e.begin(6)
		e.keyValues(1, v.AsMap())
		e.end(l)
	case attribute.SLICE:
		array(e, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.BOOLSLICE:
		array(e, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		array(e, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		array(e, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		array(e, v.AsStringSlice(), attribute.StringValue)
	default: // a type newer than this code, as the official exporters say
		e.tag(1, wireBytes)
		e.str("INVALID")
	}
	e.end(m)
}

// array writes vs as the oneof's ArrayValue.
func array[T any](e *encoder, vs []T, value func(T) attribute.Value) {
	m := e.begin(5)
	for _, v := range vs {
		e.anyValue(1, value(v))
	}
	e.end(m)
}

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// resource writes the Resource field num.
func (e *encoder) resource(num int, r *resource.Resource) {
	m := e.begin(num)
	for it := r.Iter(); it.Next(); {
		e.keyValue(1, it.Attribute())
	}
	e.end(m)
}

// scope writes the InstrumentationScope field num; its schema URL goes
// in the message that holds it.
func (e *encoder) scope(num int, s instrumentation.Scope) {
	m := e.begin(num)
	e.stringField(1, s.Name)
	e.stringField(2, s.Version)
	e.attributeSet(3, &s.Attributes)
	e.end(m)
}

// unixNano is t for a fixed64 time field: before 1970 (or zero) is 0.
func unixNano(t time.Time) uint64 {
	return uint64(max(0, t.UnixNano()))
}

// count is a dropped count for a uint32 field, clamped.
func count(n int) uint64 {
	return uint64(min(max(n, 0), math.MaxUint32))
}
