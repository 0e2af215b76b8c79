// Package recordbatch builds and reads Kafka record batches for tests:
// magic-2, uncompressed, no keys or headers. It imports only kmsg, so
// that any package's in-package tests can use it without a cycle.
package recordbatch

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Of encodes a record batch holding values at offset 0, leader epoch 0.
func Of(values ...string) []byte {
	var recs []byte
	for i, v := range values {
		var r []byte
		r = append(r, 0)                          // attributes
		r = binary.AppendVarint(r, 0)             // timestamp delta
		r = binary.AppendVarint(r, int64(i))      // offset delta
		r = binary.AppendVarint(r, -1)            // null key
		r = binary.AppendVarint(r, int64(len(v))) // value
		r = append(r, v...)
		r = binary.AppendVarint(r, 0) // no headers
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{
		Magic: 2, LastOffsetDelta: int32(len(values) - 1), FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(values)), Records: recs,
	}
	buf := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(buf[8:], uint32(len(buf)-12))
	binary.BigEndian.PutUint32(buf[17:], crc32.Checksum(buf[21:], crc32.MakeTable(crc32.Castagnoli)))
	return buf
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
