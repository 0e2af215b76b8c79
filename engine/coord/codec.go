package coord

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
)

// Enc and Dec encode and decode the coordinator records kmsg does not
// generate (KIP-848 consumer groups, KIP-932 share groups and share
// state). Kafka's "coordinator-key" messages are an int16 record type,
// then fields in the non-flexible encoding (int16-prefixed strings);
// its "coordinator-value" messages are an int16 version, then fields in
// the flexible encoding (compact strings and arrays, a tagged-field
// section after every struct).

// Enc appends fields to B.
type Enc struct{ B []byte }

func (e *Enc) I8(v int8)       { e.B = kbin.AppendInt8(e.B, v) }
func (e *Enc) I16(v int16)     { e.B = kbin.AppendInt16(e.B, v) }
func (e *Enc) I32(v int32)     { e.B = kbin.AppendInt32(e.B, v) }
func (e *Enc) I64(v int64)     { e.B = kbin.AppendInt64(e.B, v) }
func (e *Enc) Uuid(v [16]byte) { e.B = kbin.AppendUuid(e.B, v) }
func (e *Enc) KeyStr(s string) { e.B = kbin.AppendString(e.B, s) }
func (e *Enc) Str(s string)    { e.B = kbin.AppendCompactString(e.B, s) }
func (e *Enc) Nstr(s *string)  { e.B = kbin.AppendCompactNullableString(e.B, s) }
func (e *Enc) Arr(n int)       { e.B = kbin.AppendCompactArrayLen(e.B, n) }
func (e *Enc) NoTags()         { e.B = kbin.AppendUvarint(e.B, 0) }
func (e *Enc) Strs(ss []string) {
	e.Arr(len(ss))
	for _, s := range ss {
		e.Str(s)
	}
}
func (e *Enc) Int32s(vs []int32) {
	e.Arr(len(vs))
	for _, v := range vs {
		e.I32(v)
	}
}
func (e *Enc) Bytes(b []byte) { e.B = kbin.AppendCompactBytes(e.B, b) }

// taggedI64 writes a tagged-field section of int64 fields whose value
// differs from their default.
func (e *Enc) TaggedI64(fields ...TaggedI64) {
	n := 0
	for _, f := range fields {
		if f.V != f.Def {
			n++
		}
	}
	e.B = kbin.AppendUvarint(e.B, uint32(n))
	for _, f := range fields {
		if f.V != f.Def {
			e.B = kbin.AppendUvarint(e.B, f.Tag)
			e.B = kbin.AppendUvarint(e.B, 8)
			e.I64(f.V)
		}
	}
}

// TaggedI64 is an int64 tagged field and its default.
type TaggedI64 struct {
	Tag    uint32
	V, Def int64
}

// Dec reads fields; Done reports the first error.
type Dec struct{ r kbin.Reader }

// NewDec returns a decoder of b.
func NewDec(b []byte) *Dec { return &Dec{r: kbin.Reader{Src: b}} }

func (d *Dec) I8() int8       { return d.r.Int8() }
func (d *Dec) I16() int16     { return d.r.Int16() }
func (d *Dec) I32() int32     { return d.r.Int32() }
func (d *Dec) I64() int64     { return d.r.Int64() }
func (d *Dec) Uuid() [16]byte { return d.r.Uuid() }
func (d *Dec) KeyStr() string { return d.r.String() }
func (d *Dec) Str() string    { return d.r.CompactString() }
func (d *Dec) Nstr() *string  { return d.r.CompactNullableString() }
func (d *Dec) Bytes() []byte  { return slices.Clone(d.r.CompactBytes()) }
func (d *Dec) Arr() int {
	n := int(d.r.CompactArrayLen())
	// Each element takes at least one byte: a length beyond what is
	// left is corrupt, and must not size an allocation.
	if n < 0 || n > len(d.r.Src) {
		d.r.Src = nil // fails Complete
		return 0
	}
	return n
}

func (d *Dec) Strs() []string {
	n := d.Arr()
	out := make([]string, 0, n)
	for range n {
		out = append(out, d.Str())
	}
	return out
}

func (d *Dec) Int32s() []int32 {
	n := d.Arr()
	out := make([]int32, 0, n)
	for range n {
		out = append(out, d.I32())
	}
	return out
}

// tags reads a tagged-field section, passing each field's bytes to fn
// (which may ignore tags it does not know).
func (d *Dec) Tags(fn func(tag uint32, b []byte)) {
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

func (d *Dec) SkipTags() { d.Tags(nil) }

func (d *Dec) Done(what string) error {
	if err := d.r.Complete(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// tagI64 decodes an int64 tagged field.
func TagI64(b []byte) int64 {
	r := kbin.Reader{Src: b}
	return r.Int64()
}
