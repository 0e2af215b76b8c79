package mirror

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/tandem-kafka/tandem/uuid"
)

// codec encodes or decodes a flexible (KIP-482) message with one
// description of its fields: each field method writes *v when encoding and
// sets *v when decoding. Every mirror API is flexible from version 0.
type codec struct {
	w []byte
	r *kbin.Reader // nil when encoding
}

func (c *codec) i8(v *int8) {
	if c.r != nil {
		*v = c.r.Int8()
	} else {
		c.w = kbin.AppendInt8(c.w, *v)
	}
}

func (c *codec) i16(v *int16) {
	if c.r != nil {
		*v = c.r.Int16()
	} else {
		c.w = kbin.AppendInt16(c.w, *v)
	}
}

func (c *codec) i32(v *int32) {
	if c.r != nil {
		*v = c.r.Int32()
	} else {
		c.w = kbin.AppendInt32(c.w, *v)
	}
}

func (c *codec) i64(v *int64) {
	if c.r != nil {
		*v = c.r.Int64()
	} else {
		c.w = kbin.AppendInt64(c.w, *v)
	}
}

func (c *codec) boolean(v *bool) {
	if c.r != nil {
		*v = c.r.Bool()
	} else {
		c.w = kbin.AppendBool(c.w, *v)
	}
}

func (c *codec) uuid(v *uuid.UUID) {
	if c.r != nil {
		*v = c.r.Uuid()
	} else {
		c.w = kbin.AppendUuid(c.w, *v)
	}
}

func (c *codec) str(v *string) {
	if c.r != nil {
		*v = c.r.CompactString()
	} else {
		c.w = kbin.AppendCompactString(c.w, *v)
	}
}

func (c *codec) nstr(v **string) {
	if c.r != nil {
		*v = c.r.CompactNullableString()
	} else {
		c.w = kbin.AppendCompactNullableString(c.w, *v)
	}
}

func (c *codec) strs(v *[]string) {
	array(c, v, func(s *string) { c.str(s) })
}

// array codes a compact array; a null array decodes as nil.
func array[T any](c *codec, v *[]T, each func(*T)) {
	if c.r != nil {
		n := c.r.CompactArrayLen()
		if n < 0 {
			*v = nil
			return
		}
		if int(n) > len(c.r.Src) { // every element takes at least a byte
			c.r.Src = nil
			n = 0
		}
		*v = make([]T, n)
	} else {
		c.w = kbin.AppendCompactArrayLen(c.w, len(*v))
	}
	for i := range *v {
		each(&(*v)[i])
	}
}

// tag is one tagged field: present says whether to write it, code codes
// its value.
type tag struct {
	id      uint32
	present bool
	code    func(c *codec)
}

// tags codes the tagged-field section ending every struct; unknown tags
// are skipped.
func (c *codec) tags(fields ...tag) {
	if c.r != nil {
		// Stop at the end of the input: a claimed count of 2^32 tags
		// must not spin through 2^32 empty reads.
		for n := c.r.Uvarint(); n > 0 && c.r.Ok(); n-- {
			id, size := c.r.Uvarint(), c.r.Uvarint()
			body := c.r.Span(int(size))
			for _, f := range fields {
				if f.id == id {
					sub := &codec{r: &kbin.Reader{Src: body}}
					f.code(sub)
				}
			}
		}
		return
	}
	n := 0
	for _, f := range fields {
		if f.present {
			n++
		}
	}
	c.w = kbin.AppendUvarint(c.w, uint32(n))
	for _, f := range fields {
		if f.present {
			sub := &codec{}
			f.code(sub)
			c.w = kbin.AppendUvarint(c.w, f.id)
			c.w = kbin.AppendUvarint(c.w, uint32(len(sub.w)))
			c.w = append(c.w, sub.w...)
		}
	}
}

func encode(dst []byte, fields func(*codec)) []byte {
	c := &codec{w: dst}
	fields(c)
	return c.w
}

func decode(src []byte, fields func(*codec)) error {
	c := &codec{r: &kbin.Reader{Src: src}}
	fields(c)
	if err := c.r.Complete(); err != nil {
		return fmt.Errorf("decode mirror message: %w", err)
	}
	return nil
}

// version is embedded in every mirror message: all are version 0 and
// flexible.
type version struct{ v int16 }

func (m *version) MaxVersion() int16  { return 0 }
func (m *version) SetVersion(v int16) { m.v = v }
func (m *version) GetVersion() int16  { return m.v }
func (m *version) IsFlexible() bool   { return true }
