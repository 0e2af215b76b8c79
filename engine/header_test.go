package engine

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestParseBatchHeader(t *testing.T) {
	b := mkBatch(t, batchOpts{pid: 7, epoch: 3, seq: 5, attrs: recordbatch.AttrTransactional, baseTs: 1_700_000_000_123}, kv("a", "1"), kv("b", "2"), kv("c", "3"))
	binary.BigEndian.PutUint64(b[recordbatch.OffBaseOffset:], 40)
	binary.BigEndian.PutUint32(b[recordbatch.OffLeaderEpoch:], 9)
	h, err := ParseBatchHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	want := BatchHeader{BaseOffset: 40, Length: int32(len(b) - 12), PartitionLeaderEpoch: 9, Magic: 2,
		CRC: binary.BigEndian.Uint32(b[recordbatch.OffCRC:]), Attributes: recordbatch.AttrTransactional, LastOffsetDelta: 2,
		BaseTimestamp: 1_700_000_000_123, MaxTimestamp: 1_700_000_000_123, ProducerID: 7, ProducerEpoch: 3, BaseSequence: 5, NumRecords: 3}
	if h != want {
		t.Fatalf("header\n%+v, want\n%+v", h, want)
	}
	if h.Size() != int64(len(b)) || h.LastOffset() != 42 || !h.Transactional() || h.Control() || h.Compression() != 0 {
		t.Errorf("size %d, last offset %d, transactional %v, control %v, codec %d", h.Size(), h.LastOffset(), h.Transactional(), h.Control(), h.Compression())
	}

	with := func(f func(c []byte)) []byte { c := slices.Clone(b); f(c); return c }
	legacy := with(func(c []byte) { c[recordbatch.OffMagic] = 1 })
	for _, tc := range []struct {
		name string
		b    []byte
		want *kerr.Error
	}{
		{"magic 1", legacy, kerr.UnsupportedForMessageFormat},
		{"magic 0, shorter than a batch header", with(func(c []byte) { c[recordbatch.OffMagic] = 0 })[:26], kerr.UnsupportedForMessageFormat},
		{"truncated", b[:recordbatch.HeaderLen-1], kerr.CorruptMessage},
		{"empty", nil, kerr.CorruptMessage},
		{"magic 3", with(func(c []byte) { c[recordbatch.OffMagic] = 3 }), kerr.CorruptMessage},
		{"length below the header", with(func(c []byte) { binary.BigEndian.PutUint32(c[recordbatch.OffBatchLength:], 10) }), kerr.CorruptMessage},
	} {
		if _, err := ParseBatchHeader(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}

// epochBatch is a batch of one record per value at offset base with
// leader epoch epoch (neither is under the batch CRC).
func epochBatch(t *testing.T, base int64, epoch int32, values ...string) []byte {
	var recs []rec
	for _, v := range values {
		recs = append(recs, kv("k", v))
	}
	b := mkBatch(t, batchOpts{}, recs...)
	binary.BigEndian.PutUint64(b[recordbatch.OffBaseOffset:], uint64(base))
	binary.BigEndian.PutUint32(b[recordbatch.OffLeaderEpoch:], uint32(epoch))
	return b
}

func TestEpochPrefix(t *testing.T) {
	a, b, c := epochBatch(t, 0, 3, "a"), epochBatch(t, 1, 5, "b", "c"), epochBatch(t, 3, 9, "d")
	recs := slices.Concat(a, b, c)
	for _, tc := range []struct {
		bound int32
		n     int
		epoch int32
	}{
		{9, len(recs), -1},
		{100, len(recs), -1},
		{8, len(a) + len(b), 9},
		{5, len(a) + len(b), 9},
		{4, len(a), 5},
		{2, 0, 3},
	} {
		n, e, err := EpochPrefix(recs, tc.bound)
		if err != nil || n != tc.n || e != tc.epoch {
			t.Errorf("bound %d: got (%d, %d, %v), want (%d, %d)", tc.bound, n, e, err, tc.n, tc.epoch)
		}
	}
	// A partial batch at the end is left to the append.
	if n, e, err := EpochPrefix(slices.Concat(a, c[:10]), 3); err != nil || n != len(a) || e != -1 {
		t.Errorf("partial batch: got (%d, %d, %v)", n, e, err)
	}
	if _, _, err := EpochPrefix(slices.Concat(a, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}), 3); err == nil {
		t.Error("a negative batch length passed")
	}
}

// WholeBatches splits a fetch answer into its whole batches and leaves a
// partial one at the end out.
func TestWholeBatches(t *testing.T) {
	a, b := epochBatch(t, 0, 1, "a"), epochBatch(t, 1, 1, "b", "c")
	records := append(append(append([]byte{}, a...), b...), b[:len(b)-3]...)
	got := WholeBatches(records)
	if len(got) != 2 || string(got[0]) != string(a) || string(got[1]) != string(b) {
		t.Fatalf("WholeBatches: %d batches", len(got))
	}
	if got := WholeBatches(a[:20]); len(got) != 0 {
		t.Fatalf("a header alone: %d batches", len(got))
	}
}

// TestLeadingBatches counts the bytes of the leading whole batches that
// keep accepts: it stops at the first one refused and at a partial one.
func TestLeadingBatches(t *testing.T) {
	a, b, c := epochBatch(t, 0, 1, "a"), epochBatch(t, 1, 2, "b", "c"), epochBatch(t, 3, 3, "d")
	records := slices.Concat(a, b, c[:len(c)-3])
	all := func(BatchHeader) bool { return true }
	if n := LeadingBatches(records, all); n != len(a)+len(b) {
		t.Fatalf("all: %d bytes, want %d (the partial batch left out)", n, len(a)+len(b))
	}
	if n := LeadingBatches(records, func(h BatchHeader) bool { return h.PartitionLeaderEpoch < 2 }); n != len(a) {
		t.Fatalf("epochs below 2: %d bytes, want %d", n, len(a))
	}
	if n := LeadingBatches(a[:20], all); n != 0 {
		t.Fatalf("a header alone: %d bytes", n)
	}
}
