package engine

import (
	"bytes"
	"runtime"
	"testing"

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
	for _, codec := range []int8{codecGzip, codecSnappy, codecLZ4, codecZstd} {
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
		if codec == codecZstd { // one codec is enough: TestDecompressionBomb has them all, and this is slow under -race
			bombs["past the ceiling"] = encodeRecords([]rec{{key: []byte("k"), val: make([]byte, maxDecompressedBatch)}})
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
