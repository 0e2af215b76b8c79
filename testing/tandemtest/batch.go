package tandemtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kbin"
)

// Compression codecs of the record batch attributes.
const (
	CodecNone int8 = 0
	CodecGzip int8 = 1
	CodecZstd int8 = 4
)

// KV is one record of a hand-built batch.
type KV struct{ Key, Value []byte }

// RecordBatch builds a magic-2 record batch (no producer ID) the way a
// client would, for tests that send raw Produce requests.
func RecordBatch(codec int8, records ...KV) ([]byte, error) {
	ts := time.Now().UnixMilli()
	var recs []byte
	for i, r := range records {
		var rec []byte
		rec = append(rec, 0)                       // attributes
		rec = kbin.AppendVarlong(rec, 0)           // timestamp delta
		rec = kbin.AppendVarint(rec, int32(i))     // offset delta
		rec = kbin.AppendVarintBytes(rec, r.Key)   // nil key: -1
		rec = kbin.AppendVarintBytes(rec, r.Value) //
		rec = kbin.AppendVarint(rec, 0)            // no headers
		recs = kbin.AppendVarint(recs, int32(len(rec)))
		recs = append(recs, rec...)
	}
	switch codec {
	case CodecNone:
	case CodecGzip:
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(recs)
		if err := w.Close(); err != nil {
			return nil, err
		}
		recs = buf.Bytes()
	case CodecZstd:
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			return nil, err
		}
		recs = enc.EncodeAll(recs, nil)
		enc.Close()
	default:
		return nil, fmt.Errorf("codec %d not supported here", codec)
	}

	b := kbin.AppendInt64(nil, 0)         // base offset
	b = kbin.AppendInt32(b, 0)            // length, set below
	b = kbin.AppendInt32(b, -1)           // partition leader epoch
	b = append(b, 2)                      // magic
	b = kbin.AppendInt32(b, 0)            // crc, set below
	b = kbin.AppendInt16(b, int16(codec)) // attributes
	b = kbin.AppendInt32(b, int32(len(records)-1))
	b = kbin.AppendInt64(b, ts) // first timestamp
	b = kbin.AppendInt64(b, ts) // max timestamp
	b = kbin.AppendInt64(b, -1) // producer ID
	b = kbin.AppendInt16(b, -1) // producer epoch
	b = kbin.AppendInt32(b, -1) // base sequence
	b = kbin.AppendInt32(b, int32(len(records)))
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b, nil
}
