package fuzz

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// gen fills request structs with values that hit edge cases more often
// than chance would: zero, -1, the extremes of each integer type, names
// that exist and names that cannot, nil, empty and large arrays, valid
// record batches and garbage.
type gen struct {
	r        *rand.Rand
	topicIDs [][16]byte
	nonNil   bool // set after a nil pointer made encoding panic
}

// words are the strings the generator draws from, besides random ones.
var words = []string{
	"", "fuzz-a", "fuzz-b", "fuzz-compact", "fuzz-new", "__consumer_offsets", "__transaction_state", "__mirror_state",
	"g0", "g1", "txn0", "m0", "alice", "User:alice", "User:*", "*", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
	"consumer", "range", "cooperative-sticky", "retention.ms", "cleanup.policy", "compact", "delete", "max.message.bytes",
	"segment.bytes", "min.insync.replicas", "bootstrap.servers", safeAddr, "security.protocol", "PLAINTEXT",
	"-1", "0", "1", "1000", "9223372036854775807", "bad/name", "..", ".", strings.Repeat("x", 250), strings.Repeat("y", 3000),
	"\x00", "é", "client-1", "producer_byte_rate", "request_percentage", "user", "client-id",
}

func (g *gen) int(bits int) int64 {
	hi := int64(math.MaxInt64) >> (64 - bits)
	switch g.r.IntN(10) {
	case 0:
		return 0
	case 1:
		return -1
	case 2:
		return hi
	case 3:
		return -hi - 1
	case 4, 5:
		return int64(g.r.IntN(4))
	case 6:
		return int64(g.r.IntN(1000))
	default:
		return g.r.Int64() >> (64 - bits)
	}
}

func (g *gen) str() string {
	if g.r.IntN(5) == 0 {
		b := make([]byte, g.r.IntN(20))
		for i := range b {
			b[i] = byte(' ' + g.r.IntN(95))
			if b[i] == ':' { // no addresses but safeAddr (see harmful)
				b[i] = '-'
			}
		}
		return string(b)
	}
	return words[g.r.IntN(len(words))]
}

func (g *gen) bytes() []byte {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		b := make([]byte, g.r.IntN(64))
		for i := range b {
			b[i] = byte(g.r.IntN(256))
		}
		return b
	default: // a valid record batch, for Produce and the like
		kvs := make([]recordbatch.KV, 1+g.r.IntN(3))
		for i := range kvs {
			kvs[i] = recordbatch.KV{Key: []byte(g.str()), Value: []byte(g.str())}
			if g.r.IntN(4) == 0 {
				kvs[i].Key = nil
			}
		}
		codecs := []int8{recordbatch.CodecNone, recordbatch.CodecGzip, recordbatch.CodecZstd}
		b, err := recordbatch.Build(codecs[g.r.IntN(len(codecs))], kvs...)
		if err != nil {
			panic(err)
		}
		return b
	}
}

func (g *gen) uuid() [16]byte {
	switch n := g.r.IntN(4); {
	case n == 0:
		return [16]byte{}
	case n == 1 || len(g.topicIDs) == 0:
		var u [16]byte
		binary.BigEndian.PutUint64(u[:], g.r.Uint64())
		binary.BigEndian.PutUint64(u[8:], g.r.Uint64())
		return u
	default:
		return g.topicIDs[g.r.IntN(len(g.topicIDs))]
	}
}

// length is an array length: mostly small, sometimes large.
func (g *gen) length(depth int) int {
	switch n := g.r.IntN(20); {
	case n < 4:
		return 0
	case n < 16 || depth > 2:
		return 1 + g.r.IntN(3)
	case n < 19:
		return 50
	default:
		return 1000
	}
}

var (
	tagsType = reflect.TypeFor[kmsg.Tags]()
	uuidType = reflect.TypeFor[[16]byte]()
)

// fill sets every exported field of v (but the request's Version, which
// SetVersion sets).
func (g *gen) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == tagsType {
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && !(depth == 0 && f.Name == "Version") {
				g.fill(v.Field(i), depth+1)
			}
		}
	case reflect.Bool:
		v.SetBool(g.r.IntN(2) == 0)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(g.int(v.Type().Bits()))
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(g.int(v.Type().Bits())))
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, -1, 1, math.MaxFloat64, math.Inf(1), math.NaN(), g.r.Float64() * 1e6}[g.r.IntN(7)])
	case reflect.String:
		v.SetString(g.str())
	case reflect.Pointer:
		if !g.nonNil && g.r.IntN(5) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		g.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes(g.bytes())
			return
		}
		n := g.length(depth)
		if n == 0 && !g.nonNil && g.r.IntN(2) == 0 {
			v.SetZero() // nil: a null array where the version allows one
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			g.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		if v.Type() == uuidType {
			v.Set(reflect.ValueOf(g.uuid()))
			return
		}
		for i := range v.Len() {
			g.fill(v.Index(i), depth+1)
		}
	}
}

// encode fills req at version and encodes its body. kmsg panics encoding a
// nil pointer where the version has no null: then every pointer is set.
func (g *gen) encode(req kmsg.Request, version int16) ([]byte, bool) {
	for _, nonNil := range []bool{g.nonNil, true} {
		g.nonNil = nonNil
		if body, ok := g.tryEncode(req, version); ok {
			return body, true
		}
	}
	return nil, false
}

func (g *gen) tryEncode(req kmsg.Request, version int16) (body []byte, ok bool) {
	defer func() {
		if recover() != nil {
			body, ok = nil, false
		}
	}()
	g.fill(reflect.ValueOf(req).Elem(), 0)
	req.SetVersion(version)
	return req.AppendTo(nil), true
}

// mutate changes body as ops say, three bytes an operation: flip a byte,
// write an extreme 32-bit integer (an array length, a size), truncate,
// append garbage, or repeat a slice.
func mutate(body, ops []byte) []byte {
	for ; len(ops) >= 3 && len(body) > 0; ops = ops[3:] {
		at := int(binary.BigEndian.Uint16(ops[1:])) % len(body)
		switch ops[0] % 5 {
		case 0:
			body[at] ^= 1 << (ops[2] % 8)
		case 1:
			extremes := []uint32{0x7fffffff, 0xffffffff, 0x80000000, 0x00010000, 0x0fffffff}
			x := binary.BigEndian.AppendUint32(nil, extremes[int(ops[2])%len(extremes)])
			body = append(body[:at], append(x, body[min(at+4, len(body)):]...)...)
		case 2:
			body = body[:at]
		case 3:
			body = append(body, ops[2], 0xff, 0xff, 0xff, 0x7f)
		case 4:
			end := min(len(body), at+int(ops[2]))
			body = append(body[:end], append(append([]byte(nil), body[at:end]...), body[end:]...)...)
		}
	}
	return body
}

// walkStrings calls fn for every string reachable from v.
func walkStrings(v any, fn func(string)) {
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			fn(v.String())
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice, reflect.Array:
			if v.Type().Elem().Kind() != reflect.Uint8 {
				for i := range v.Len() {
					walk(v.Index(i))
				}
			}
		}
	}
	walk(reflect.ValueOf(v))
}
