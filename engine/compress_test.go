package engine

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestCompressedBatchBound: a compressed batch is bounded, as in Apache
// Kafka, by its stored size against max.message.bytes, and what it
// inflates to by the fixed ceiling: a 3 MiB record that compresses to a
// few KiB is accepted on a topic of the default 1 MiB and reads back
// whole; a batch inflating past the ceiling, or carrying a key over the
// streamed-key bound, is refused without the broker allocating either.
func TestCompressedBatchBound(t *testing.T) {
	e := openTest(t, nil)
	cfg := DefaultLogConfig() // max.message.bytes 1048588
	p := mkPart(t, e, cfg)
	big := bytes.Repeat([]byte("tandem "), (3<<20)/7)
	next := int64(0)
	for _, codec := range []int8{recordbatch.CodecGzip, recordbatch.CodecSnappy, recordbatch.CodecLZ4, recordbatch.CodecZstd} {
		b := mkBatch(t, batchOpts{codec: codec}, rec{key: []byte("k"), val: big})
		if len(b) >= int(cfg.MaxMessageBytes) {
			t.Fatalf("codec %d: %d bytes compressed, must be under max.message.bytes", codec, len(b))
		}
		if res := appendOK(t, p, OriginClient, b); res.BaseOffset != next {
			t.Fatalf("codec %d: appended at %d, want %d", codec, res.BaseOffset, next)
		}
		got := recordsOf(t, fetchAll(t, p, next))
		if got[next] != "k="+string(big) {
			t.Fatalf("codec %d: read back %d bytes at %d", codec, len(got[next]), next)
		}
		next++

		bombs := map[string][]byte{"2 MiB key": encodeRecords([]rec{{key: make([]byte, 2<<20), val: []byte("v")}})}
		if codec == recordbatch.CodecZstd { // one codec is enough: TestDecompressionBomb has them all, and this is slow under -race
			bombs["past the ceiling"] = encodeRecords([]rec{{key: []byte("k"), val: make([]byte, recordbatch.MaxDecompressed)}})
		}
		for name, payload := range bombs {
			bomb := mkBatch(t, batchOpts{codec: codec, payload: payload, count: 1})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := appendErr(p, bomb)
			runtime.ReadMemStats(&after)
			if kcode(err) != kerr.MessageTooLarge.Code {
				t.Fatalf("codec %d, %s: %v, want MESSAGE_TOO_LARGE", codec, name, err)
			}
			// A decoder's own buffers (lz4 blocks, a zstd window) at most.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
				t.Fatalf("codec %d, %s: refusing it allocated %d MiB", codec, name, alloc>>20)
			}
		}
	}
	// The stored size still counts: 2 MiB uncompressed is too large.
	if err := appendErr(p, mkBatch(t, batchOpts{}, rec{key: []byte("k"), val: make([]byte, 2<<20)})); kcode(err) != kerr.MessageTooLarge.Code {
		t.Fatalf("a 2 MiB uncompressed batch: %v", err)
	}
}

// TestDecodeMemory: what validating a batch may allocate to decompress
// it, read from its header, for every codec.
func TestDecodeMemory(t *testing.T) {
	payload := encodeRecords([]rec{kv("k", strings.Repeat("x", 3<<20))})
	n := int64(len(payload))
	for _, c := range []struct {
		name string
		o    batchOpts
		want func(int64) bool
	}{
		{"none", batchOpts{}, func(m int64) bool { return m == 0 }},
		{"raw snappy", batchOpts{codec: recordbatch.CodecSnappy, rawSnap: true}, func(m int64) bool { return m == n }},
		{"xerial snappy", batchOpts{codec: recordbatch.CodecSnappy}, func(m int64) bool { return m == n }},
		{"zstd", batchOpts{codec: recordbatch.CodecZstd}, func(m int64) bool { return m > 0 && m <= 8<<20+recordbatch.StreamOverhead }},
		{"lz4", batchOpts{codec: recordbatch.CodecLZ4}, func(m int64) bool { return m >= 2*64<<10 && m <= 2*4<<20+recordbatch.StreamOverhead }},
		{"gzip", batchOpts{codec: recordbatch.CodecGzip}, func(m int64) bool { return m == 32<<10+recordbatch.StreamOverhead }},
	} {
		c.o.payload = payload
		b := mkBatch(t, c.o, kv("k", "unused"))
		if m := DecodeMemory(b); !c.want(m) {
			t.Errorf("%s: DecodeMemory %d (records %d bytes)", c.name, m, n)
		}
	}
	// Several batches are validated one after the other: the largest.
	small := mkBatch(t, batchOpts{codec: recordbatch.CodecSnappy, rawSnap: true}, kv("k", "v"))
	big := mkBatch(t, batchOpts{codec: recordbatch.CodecSnappy, rawSnap: true, payload: payload}, kv("k", "unused"))
	if m := DecodeMemory(append(append([]byte(nil), small...), big...)); m != n {
		t.Errorf("two batches: %d, want %d", m, n)
	}
	// A bomb declares more than the engine decodes: capped.
	bomb := encodeRecords([]rec{kv("k", strings.Repeat("x", 80<<20))})
	if m := DecodeMemory(mkBatch(t, batchOpts{codec: recordbatch.CodecSnappy, rawSnap: true, payload: bomb}, kv("k", "unused"))); m != recordbatch.MaxDecompressed {
		t.Errorf("bomb: %d, want the cap %d", m, recordbatch.MaxDecompressed)
	}
}
