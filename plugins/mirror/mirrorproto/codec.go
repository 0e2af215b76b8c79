package mirrorproto

import (
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// The mirror messages are coded as kmsg's are generated: from one
// description per message, a list of its fields in wire order (see
// schemas in messages.go), which one encoder and decoder walk. Every
// mirror API is flexible (KIP-482) from version 0: strings and arrays are
// compact, and every struct, the message itself and each array element,
// ends with its tagged fields.

// kind is a field's wire type.
type kind int8

const (
	kInt8    kind = iota
	kInt16        // int16
	kInt32        // int32
	kInt64        // int64
	kBool         // bool
	kUUID         // uuid.UUID
	kString       // string, compact
	kNString      // *string, compact nullable
	kStructs      // []struct, compact array; each element is described by elem
	kScalars      // []string or []int32, compact array of elemKind
)

// field describes one field of a message or of an array element: the Go
// struct field it codes (by name, promoted fields included) and how.
type field struct {
	name     string
	kind     kind
	elem     []field // kStructs: the element's fields
	elemKind kind    // kScalars: the element's type
	elemTags bool    // kScalars: each element is followed by (empty) tagged fields
	tag      int     // the tag of a tagged field, -1 for a field in order
	always   bool    // a tagged field written even when zero
	absent   int64   // a tagged integer's value when the input lacks it
}

func scalar(name string, k kind) field { return field{name: name, kind: k, tag: -1} }

func i8(name string) field      { return scalar(name, kInt8) }
func i16(name string) field     { return scalar(name, kInt16) }
func i32(name string) field     { return scalar(name, kInt32) }
func i64(name string) field     { return scalar(name, kInt64) }
func boolean(name string) field { return scalar(name, kBool) }
func uid(name string) field     { return scalar(name, kUUID) }
func str(name string) field     { return scalar(name, kString) }
func nstr(name string) field    { return scalar(name, kNString) }

// strs is an array of strings.
func strs(name string) field {
	return field{name: name, kind: kScalars, elemKind: kString, tag: -1}
}

// structs is an array of structs whose fields are elem.
func structs(name string, elem ...field) field {
	return field{name: name, kind: kStructs, elem: elem, tag: -1}
}

// tagged makes f tagged field id, written when it is not zero (an array
// when it is not empty).
func tagged(id int, f field) field {
	f.tag = id
	return f
}

// alwaysTagged makes f tagged field id, written even when zero; absent
// is its value when a message without it is read.
func alwaysTagged(id int, f field, absent int64) field {
	f.tag, f.always, f.absent = id, true, absent
	return f
}

// codec encodes (r nil) or decodes one message.
type codec struct {
	w []byte
	r *kbin.Reader // nil when encoding
}

func encode(dst []byte, m any) []byte {
	c := &codec{w: dst}
	c.fields(reflect.ValueOf(m).Elem(), schemaOf(m))
	return c.w
}

func decode(src []byte, m any) error {
	c := &codec{r: &kbin.Reader{Src: src}}
	c.fields(reflect.ValueOf(m).Elem(), schemaOf(m))
	if err := c.r.Complete(); err != nil {
		return fmt.Errorf("decode mirror message: %w", err)
	}
	return nil
}

func schemaOf(m any) []field {
	fs, ok := schemas[reflect.TypeOf(m)]
	if !ok {
		panic(fmt.Sprintf("mirror: no schema for %T", m))
	}
	return fs
}

// fields codes struct v: its fields in order, then its tagged fields.
func (c *codec) fields(v reflect.Value, fs []field) {
	var tags []field
	for _, f := range fs {
		if f.tag >= 0 {
			tags = append(tags, f)
			continue
		}
		c.field(v.FieldByName(f.name), f)
	}
	c.tags(v, tags)
}

func (c *codec) field(v reflect.Value, f field) {
	switch f.kind {
	case kStructs:
		c.array(v, func(e reflect.Value) { c.fields(e, f.elem) })
	case kScalars:
		c.array(v, func(e reflect.Value) {
			c.scalar(e, f.elemKind)
			if f.elemTags {
				c.tags(e, nil)
			}
		})
	default:
		c.scalar(v, f.kind)
	}
}

func (c *codec) scalar(v reflect.Value, k kind) {
	p := v.Addr().Interface()
	if c.r != nil {
		switch k {
		case kInt8:
			*p.(*int8) = c.r.Int8()
		case kInt16:
			*p.(*int16) = c.r.Int16()
		case kInt32:
			*p.(*int32) = c.r.Int32()
		case kInt64:
			*p.(*int64) = c.r.Int64()
		case kBool:
			*p.(*bool) = c.r.Bool()
		case kUUID:
			*p.(*uuid.UUID) = c.r.Uuid()
		case kString:
			*p.(*string) = c.r.CompactString()
		case kNString:
			*p.(**string) = c.r.CompactNullableString()
		}
		return
	}
	switch k {
	case kInt8:
		c.w = kbin.AppendInt8(c.w, *p.(*int8))
	case kInt16:
		c.w = kbin.AppendInt16(c.w, *p.(*int16))
	case kInt32:
		c.w = kbin.AppendInt32(c.w, *p.(*int32))
	case kInt64:
		c.w = kbin.AppendInt64(c.w, *p.(*int64))
	case kBool:
		c.w = kbin.AppendBool(c.w, *p.(*bool))
	case kUUID:
		c.w = kbin.AppendUuid(c.w, *p.(*uuid.UUID))
	case kString:
		c.w = kbin.AppendCompactString(c.w, *p.(*string))
	case kNString:
		c.w = kbin.AppendCompactNullableString(c.w, *p.(**string))
	}
}

// array codes a compact array; a null array decodes as nil.
func (c *codec) array(v reflect.Value, each func(reflect.Value)) {
	if c.r != nil {
		n := c.r.CompactArrayLen()
		if n < 0 {
			v.SetZero()
			return
		}
		if int(n) > len(c.r.Src) { // every element takes at least a byte
			c.r.Src = nil
			n = 0
		}
		v.Set(reflect.MakeSlice(v.Type(), int(n), int(n)))
	} else {
		c.w = kbin.AppendCompactArrayLen(c.w, v.Len())
	}
	for i := range v.Len() {
		each(v.Index(i))
	}
}

// defaultTagged makes integer f tagged field id, written when it is not
// absent, its value when a message without it is read.
func defaultTagged(id int, f field, absent int64) field {
	f.tag, f.absent = id, absent
	return f
}

// present reports whether tagged field v is written.
func present(v reflect.Value, f field) bool {
	switch {
	case f.always:
		return true
	case f.absent != 0:
		return v.Int() != f.absent
	}
	if v.Kind() == reflect.Slice {
		return v.Len() > 0
	}
	return !v.IsZero()
}

// tags codes the tagged fields fs of struct v, in the order of fs;
// unknown tags are skipped when decoding.
func (c *codec) tags(v reflect.Value, fs []field) {
	if c.r != nil {
		for _, f := range fs {
			if f.absent != 0 {
				v.FieldByName(f.name).SetInt(f.absent)
			}
		}
		// Stop at the end of the input: a claimed count of 2^32 tags
		// must not spin through 2^32 empty reads.
		for n := c.r.Uvarint(); n > 0 && c.r.Ok(); n-- {
			id, size := c.r.Uvarint(), c.r.Uvarint()
			body := c.r.Span(int(size))
			for _, f := range fs {
				if uint32(f.tag) == id {
					sub := &codec{r: &kbin.Reader{Src: body}}
					sub.field(v.FieldByName(f.name), f)
				}
			}
		}
		return
	}
	n := 0
	for _, f := range fs {
		if present(v.FieldByName(f.name), f) {
			n++
		}
	}
	c.w = kbin.AppendUvarint(c.w, uint32(n))
	for _, f := range fs {
		if fv := v.FieldByName(f.name); present(fv, f) {
			sub := &codec{}
			sub.field(fv, f)
			c.w = kbin.AppendUvarint(c.w, uint32(f.tag))
			c.w = kbin.AppendUvarint(c.w, uint32(len(sub.w)))
			c.w = append(c.w, sub.w...)
		}
	}
}

// version is embedded in every mirror message: all are version 0 and
// flexible.
type version struct{ v int16 }

func (m *version) MaxVersion() int16  { return 0 }
func (m *version) SetVersion(v int16) { m.v = v }
func (m *version) GetVersion() int16  { return m.v }
func (m *version) IsFlexible() bool   { return true }
