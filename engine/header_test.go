package engine

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestParseBatchHeader(t *testing.T) {
	b := mkBatch(t, batchOpts{pid: 7, epoch: 3, seq: 5, attrs: attrTransactional, baseTs: 1_700_000_000_123}, kv("a", "1"), kv("b", "2"), kv("c", "3"))
	binary.BigEndian.PutUint64(b[offBaseOffset:], 40)
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 9)
	h, err := ParseBatchHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	want := BatchHeader{BaseOffset: 40, Length: int32(len(b) - 12), PartitionLeaderEpoch: 9, Magic: 2,
		CRC: binary.BigEndian.Uint32(b[offCRC:]), Attributes: attrTransactional, LastOffsetDelta: 2,
		BaseTimestamp: 1_700_000_000_123, MaxTimestamp: 1_700_000_000_123, ProducerID: 7, ProducerEpoch: 3, BaseSequence: 5, NumRecords: 3}
	if h != want {
		t.Fatalf("header\n%+v, want\n%+v", h, want)
	}
	if h.Size() != int64(len(b)) || h.LastOffset() != 42 || !h.Transactional() || h.Control() || h.Compression() != 0 {
		t.Errorf("size %d, last offset %d, transactional %v, control %v, codec %d", h.Size(), h.LastOffset(), h.Transactional(), h.Control(), h.Compression())
	}

	with := func(f func(c []byte)) []byte { c := slices.Clone(b); f(c); return c }
	legacy := with(func(c []byte) { c[offMagic] = 1 })
	for _, tc := range []struct {
		name string
		b    []byte
		want *kerr.Error
	}{
		{"magic 1", legacy, kerr.UnsupportedForMessageFormat},
		{"magic 0, shorter than a batch header", with(func(c []byte) { c[offMagic] = 0 })[:26], kerr.UnsupportedForMessageFormat},
		{"truncated", b[:batchHeaderLen-1], kerr.CorruptMessage},
		{"empty", nil, kerr.CorruptMessage},
		{"magic 3", with(func(c []byte) { c[offMagic] = 3 }), kerr.CorruptMessage},
		{"length below the header", with(func(c []byte) { binary.BigEndian.PutUint32(c[offBatchLength:], 10) }), kerr.CorruptMessage},
	} {
		if _, err := ParseBatchHeader(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}
