package engine

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestValidateBatches(t *testing.T) {
	recs := []rec{kv("a", "1"), kv("b", "2"), {key: []byte("c")}}
	good := mkBatch(t, batchOpts{}, recs...)
	corruptCRC := bytes.Clone(good)
	corruptCRC[len(corruptCRC)-1] ^= 0xff
	badMagic := bytes.Clone(good)
	badMagic[recordbatch.OffMagic] = 1
	longLength := bytes.Clone(good)
	binary.BigEndian.PutUint32(longLength[recordbatch.OffBatchLength:], uint32(len(good)))
	// A record whose length varint claims one byte more than it has.
	payload := encodeRecords(recs)
	payload[0] += 2 // zigzag: +1
	badRecordLen := mkBatch(t, batchOpts{payload: payload, count: 3, lastDelt: 2})
	// Offset deltas out of order.
	payload = encodeRecords(recs[:1])
	payload = append(payload, encodeRecords(recs[:1])...) // second record has offset delta 0 again
	badDelta := mkBatch(t, batchOpts{payload: payload, count: 2, lastDelt: 1})

	compacted := DefaultLogConfig()
	compacted.Compact = true
	small := DefaultLogConfig()
	small.MaxMessageBytes = 70

	for _, tc := range []struct {
		name    string
		records []byte
		cfg     LogConfig
		want    int16
	}{
		{"ok", good, DefaultLogConfig(), 0},
		{"two batches", append(bytes.Clone(good), good...), DefaultLogConfig(), 0},
		{"gzip", mkBatch(t, batchOpts{codec: recordbatch.CodecGzip}, recs...), DefaultLogConfig(), 0},
		{"snappy xerial", mkBatch(t, batchOpts{codec: recordbatch.CodecSnappy}, recs...), DefaultLogConfig(), 0},
		{"snappy raw", mkBatch(t, batchOpts{codec: recordbatch.CodecSnappy, rawSnap: true}, recs...), DefaultLogConfig(), 0},
		{"lz4", mkBatch(t, batchOpts{codec: recordbatch.CodecLZ4}, recs...), DefaultLogConfig(), 0},
		{"zstd", mkBatch(t, batchOpts{codec: recordbatch.CodecZstd}, recs...), DefaultLogConfig(), 0},
		{"empty", nil, DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"bad crc", corruptCRC, DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"magic 1", badMagic, DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"length past end", longLength, DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"truncated", good[:len(good)-3], DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"short header", good[:40], DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"trailing garbage", append(bytes.Clone(good), 1, 2, 3), DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"count above records", mkBatch(t, batchOpts{payload: encodeRecords(recs), count: 4, lastDelt: 3}), DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"count below records", mkBatch(t, batchOpts{payload: encodeRecords(recs), count: 2, lastDelt: 1}), DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"count vs last delta", mkBatch(t, batchOpts{payload: encodeRecords(recs), count: 3, lastDelt: 5}), DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"compressed count mismatch", mkBatch(t, batchOpts{codec: recordbatch.CodecZstd, payload: encodeRecords(recs), count: 2, lastDelt: 1}), DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"garbage compressed payload", mkBatch(t, batchOpts{codec: recordbatch.CodecLZ4, payload: []byte("not lz4"), count: 1}), DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"record length", badRecordLen, DefaultLogConfig(), kerr.CorruptMessage.Code},
		{"offset deltas", badDelta, DefaultLogConfig(), kerr.InvalidRecord.Code},
		{"too large", good, small, kerr.MessageTooLarge.Code},
		{"control from client", mkBatch(t, batchOpts{attrs: recordbatch.AttrControl}, recs...), DefaultLogConfig(), kerr.InvalidRecord.Code},
		{"null key on compacted", good, compacted, 0},
		{"null key on compacted", mkBatch(t, batchOpts{}, rec{val: []byte("v")}), compacted, kerr.InvalidRecord.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := openTest(t, nil)
			p := mkPart(t, e, tc.cfg)
			err := appendErr(p, tc.records)
			if got := kcode(err); got != tc.want {
				t.Fatalf("got code %d (%v), want %d", got, err, tc.want)
			}
			if wantEnd := int64(0); tc.want != 0 && p.Offsets().LogEnd != wantEnd {
				t.Fatalf("rejected append moved the log end to %d", p.Offsets().LogEnd)
			}
		})
	}
}

// FuzzAppend feeds arbitrary bytes to append validation: it must never
// panic, and whatever it accepts must read back byte-identical.
func FuzzAppend(f *testing.F) {
	f.Add(mkBatch(f, batchOpts{}, kv("a", "1")))
	f.Add(mkBatch(f, batchOpts{codec: recordbatch.CodecZstd}, kv("a", "1"), kv("b", "2")))
	f.Add(mkBatch(f, batchOpts{codec: recordbatch.CodecGzip}, kv("a", "1")))
	f.Add(mkBatch(f, batchOpts{codec: recordbatch.CodecSnappy}, kv("a", "1")))
	f.Add(mkBatch(f, batchOpts{codec: recordbatch.CodecLZ4}, kv("a", "1")))
	e := openTest(f, nil)
	cfg := DefaultLogConfig()
	cfg.Compact = true
	p := mkPart(f, e, cfg)
	mirror, _ := e.Create("mirror", TopicID{2}, 0, DefaultLogConfig())
	f.Fuzz(func(t *testing.T, records []byte) {
		// Fix the CRC so that the fuzzer gets past it into the records.
		if len(records) >= recordbatch.HeaderLen {
			if n := int(int32(binary.BigEndian.Uint32(records[recordbatch.OffBatchLength:]))); n >= recordbatch.HeaderLen-12 && n+12 <= len(records) {
				recordbatch.Batch(records[:n+12]).FixCRC()
			}
		}
		// Mirrored batches skip record validation: they must still
		// never break the log's offsets.
		if res, err := mirror.Append(t.Context(), &AppendRequest{Records: records, Origin: OriginCrossCluster, Acks: 1}); err == nil {
			if o := mirror.Offsets(); o.LogEnd != res.LastOffset+1 || o.HighWatermark != o.LogEnd {
				t.Fatalf("mirror append %+v left offsets %+v", res, o)
			}
		}
		before := p.Offsets().LogEnd
		res, err := p.Append(t.Context(), &AppendRequest{Records: records, Origin: OriginClient, Acks: 1})
		if err != nil {
			if p.Offsets().LogEnd != before {
				t.Fatal("rejected append changed the log")
			}
			return
		}
		got, err := p.Fetch(res.BaseOffset, 1, ReadUncommitted)
		if err != nil || len(got.Batches) == 0 {
			t.Fatalf("accepted append does not read back: %v", err)
		}
	})
}
