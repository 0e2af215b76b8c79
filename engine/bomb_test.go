package engine

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestDecompressionBomb appends small compressed batches that inflate to
// 64 MiB on a compacted topic limited to 1 MiB: they are rejected with
// MESSAGE_TOO_LARGE without the engine allocating anything near that.
func TestDecompressionBomb(t *testing.T) {
	e := openTest(t, nil)
	cfg := DefaultLogConfig()
	cfg.Compact = true
	p := mkPart(t, e, cfg)
	huge := rec{key: []byte("k"), val: make([]byte, 64<<20)}
	payload := encodeRecords([]rec{huge})
	// A record claiming a 1 GiB key with nothing behind it.
	claim := recordbatch.AppendVarint(nil, 100)
	claim = append(claim, 0, 0, 0) // attributes, timestamp delta, offset delta
	claim = recordbatch.AppendVarint(claim, 1<<30)
	for _, codec := range []int8{recordbatch.CodecZstd, recordbatch.CodecGzip, recordbatch.CodecLZ4, recordbatch.CodecSnappy} {
		bomb := mkBatch(t, batchOpts{codec: codec, payload: payload, count: 1})
		liar := mkBatch(t, batchOpts{codec: codec, payload: claim, count: 1})
		if len(bomb) > 4<<20 {
			t.Fatalf("codec %d: bomb of %d bytes is not a bomb", codec, len(bomb))
		}
		// Warm the decoder pools so that only per-append allocations count.
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{codec: codec}, kv("a", "1")))
		for name, b := range map[string][]byte{"bomb": bomb, "liar": liar} {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := appendErr(p, b)
			runtime.ReadMemStats(&after)
			if code := kcode(err); code != kerr.MessageTooLarge.Code && !(name == "liar" && code == kerr.CorruptMessage.Code) {
				t.Fatalf("codec %d %s: %v", codec, name, err)
			}
			// A fresh decoder may allocate its format's working buffers
			// (lz4: 2 x 4 MiB blocks; zstd: an 8 MiB window at most), never
			// anything that grows with the inflated size.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
				t.Fatalf("codec %d %s: rejecting allocated %d MiB", codec, name, alloc>>20)
			}
		}
	}
	// A zstd stream that does not declare its size: the decoder's window
	// cap (8 MiB) bounds what it reserves.
	var zbuf bytes.Buffer
	zw, _ := zstd.NewWriter(&zbuf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(8<<20))
	zw.Write(payload)
	zw.Close()
	stream := mkBatch(t, batchOpts{payload: payload, count: 1})
	stream = append(stream[:recordbatch.HeaderLen:recordbatch.HeaderLen], zbuf.Bytes()...)
	binary.BigEndian.PutUint16(stream[recordbatch.OffAttributes:], recordbatch.CodecZstd)
	binary.BigEndian.PutUint32(stream[recordbatch.OffBatchLength:], uint32(len(stream)-12))
	recordbatch.Batch(stream).FixCRC()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := appendErr(p, stream)
	runtime.ReadMemStats(&after)
	if kcode(err) != kerr.MessageTooLarge.Code {
		t.Fatalf("zstd stream: %v", err)
	}
	t.Logf("zstd stream bomb: %d KiB allocated", (after.TotalAlloc-before.TotalAlloc)>>10)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("zstd stream: rejecting allocated %d MiB", alloc>>20)
	}
	// The same bomb uncompressed is simply too large.
	if err := appendErr(p, mkBatch(t, batchOpts{}, rec{key: []byte("k"), val: bytes.Repeat([]byte{1}, 2<<20)})); kcode(err) != kerr.MessageTooLarge.Code {
		t.Fatalf("uncompressed: %v", err)
	}
}
