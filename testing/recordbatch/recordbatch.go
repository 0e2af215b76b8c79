// Package recordbatch builds and reads Kafka record batches for tests:
// magic-2, no producer ID, no headers, uncompressed or gzip or zstd. It
// imports no package of Tandem's, so that any package's in-package tests
// can use it without a cycle.
package recordbatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/klauspost/compress/gzip"
	"hash/crc32"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Of encodes an uncompressed record batch holding values (null keys) at
// offset 0, leader epoch 0.
func Of(values ...string) []byte {
	kvs := make([]KV, len(values))
	for i, v := range values {
		kvs[i].Value = []byte(v)
	}
	b, err := Build(CodecNone, kvs...)
	if err != nil {
		panic(err) // no codec, nothing to fail
	}
	binary.BigEndian.PutUint32(b[12:], 0) // leader epoch, not under the CRC
	return b
}

// At is Of's batch at offset base with leader epoch epoch (neither is
// under the batch CRC).
func At(base int64, epoch int32, values ...string) []byte {
	b := Of(values...)
	binary.BigEndian.PutUint64(b, uint64(base))
	binary.BigEndian.PutUint32(b[12:], uint32(epoch))
	return b
}

// Values decodes the record values of the batches in recs (which must be
// uncompressed), with the offset of each.
func Values(t testing.TB, recs []byte) (offsets []int64, values []string) {
	t.Helper()
	for len(recs) > 0 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(recs); err != nil {
			t.Fatalf("decode batch: %v", err)
		}
		recs = recs[12+rb.Length:]
		if rb.Attributes&7 != 0 {
			t.Fatalf("batch is compressed")
		}
		raw := rb.Records
		for range rb.NumRecords {
			l, n := binary.Varint(raw)
			var r kmsg.Record
			if err := r.ReadFrom(raw[:n+int(l)]); err != nil {
				t.Fatalf("decode record: %v", err)
			}
			raw = raw[n+int(l):]
			offsets = append(offsets, rb.FirstOffset+int64(r.OffsetDelta))
			values = append(values, string(r.Value))
		}
	}
	return offsets, values
}

// Compression codecs of the record batch attributes.
const (
	CodecNone int8 = 0
	CodecGzip int8 = 1
	CodecZstd int8 = 4
)

// KV is one record of a hand-built batch.
type KV struct{ Key, Value []byte }

// Build encodes a magic-2 record batch of records (no producer ID, leader
// epoch -1) the way a client would, for tests that send raw Produce
// requests.
func Build(codec int8, records ...KV) ([]byte, error) {
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
