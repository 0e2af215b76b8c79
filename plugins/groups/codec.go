package groups

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
)

// A small codec for the records of KIP-848 consumer groups and KIP-932
// share groups, which kmsg does not generate. Their keys are Kafka's
// "coordinator-key" messages: an int16 record type, then fields in the
// non-flexible encoding (int16-prefixed strings). Their values are
// "coordinator-value" messages: an int16 version (0), then fields in the
// flexible encoding (compact strings and arrays, a tagged-field section
// after every struct).

type enc struct{ b []byte }

func (e *enc) i8(v int8)       { e.b = kbin.AppendInt8(e.b, v) }
func (e *enc) i16(v int16)     { e.b = kbin.AppendInt16(e.b, v) }
func (e *enc) i32(v int32)     { e.b = kbin.AppendInt32(e.b, v) }
func (e *enc) i64(v int64)     { e.b = kbin.AppendInt64(e.b, v) }
func (e *enc) uuid(v [16]byte) { e.b = kbin.AppendUuid(e.b, v) }
func (e *enc) keyStr(s string) { e.b = kbin.AppendString(e.b, s) }
func (e *enc) str(s string)    { e.b = kbin.AppendCompactString(e.b, s) }
func (e *enc) nstr(s *string)  { e.b = kbin.AppendCompactNullableString(e.b, s) }
func (e *enc) arr(n int)       { e.b = kbin.AppendCompactArrayLen(e.b, n) }
func (e *enc) noTags()         { e.b = kbin.AppendUvarint(e.b, 0) }
func (e *enc) strs(ss []string) {
	e.arr(len(ss))
	for _, s := range ss {
		e.str(s)
	}
}
func (e *enc) int32s(vs []int32) {
	e.arr(len(vs))
	for _, v := range vs {
		e.i32(v)
	}
}
func (e *enc) bytes(b []byte) { e.b = kbin.AppendCompactBytes(e.b, b) }

// taggedI64 writes a tagged-field section of int64 fields whose value
// differs from their default.
func (e *enc) taggedI64(fields ...taggedField) {
	n := 0
	for _, f := range fields {
		if f.v != f.def {
			n++
		}
	}
	e.b = kbin.AppendUvarint(e.b, uint32(n))
	for _, f := range fields {
		if f.v != f.def {
			e.b = kbin.AppendUvarint(e.b, f.tag)
			e.b = kbin.AppendUvarint(e.b, 8)
			e.i64(f.v)
		}
	}
}

type taggedField struct {
	tag    uint32
	v, def int64
}

type dec struct{ r kbin.Reader }

func newDec(b []byte) *dec { return &dec{r: kbin.Reader{Src: b}} }

func (d *dec) i8() int8       { return d.r.Int8() }
func (d *dec) i16() int16     { return d.r.Int16() }
func (d *dec) i32() int32     { return d.r.Int32() }
func (d *dec) i64() int64     { return d.r.Int64() }
func (d *dec) uuid() [16]byte { return d.r.Uuid() }
func (d *dec) keyStr() string { return d.r.String() }
func (d *dec) str() string    { return d.r.CompactString() }
func (d *dec) nstr() *string  { return d.r.CompactNullableString() }
func (d *dec) bytes() []byte  { return slices.Clone(d.r.CompactBytes()) }
func (d *dec) arr() int {
	n := int(d.r.CompactArrayLen())
	// Each element takes at least one byte: a length beyond what is
	// left is corrupt, and must not size an allocation.
	if n < 0 || n > len(d.r.Src) {
		d.r.Src = nil // fails Complete
		return 0
	}
	return n
}

func (d *dec) strs() []string {
	n := d.arr()
	out := make([]string, 0, n)
	for range n {
		out = append(out, d.str())
	}
	return out
}

func (d *dec) int32s() []int32 {
	n := d.arr()
	out := make([]int32, 0, n)
	for range n {
		out = append(out, d.i32())
	}
	return out
}

// tags reads a tagged-field section, passing each field's bytes to fn
// (which may ignore tags it does not know).
func (d *dec) tags(fn func(tag uint32, b []byte)) {
	n := d.r.Uvarint()
	for range n {
		tag := d.r.Uvarint()
		size := d.r.Uvarint()
		b := d.r.Span(int(size))
		if fn != nil && d.r.Ok() {
			fn(tag, b)
		}
	}
}

func (d *dec) skipTags() { d.tags(nil) }

func (d *dec) done(what string) error {
	if err := d.r.Complete(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// tagI64 decodes an int64 tagged field.
func tagI64(b []byte) int64 {
	r := kbin.Reader{Src: b}
	return r.Int64()
}
