package fetch

import (
	"encoding/binary"
	"testing"
)

func TestBatchHelpers(t *testing.T) {
	batch := func(base int64, epoch int32, size int) []byte {
		b := make([]byte, size)
		binary.BigEndian.PutUint64(b, uint64(base))
		binary.BigEndian.PutUint32(b[8:], uint32(size-12))
		binary.BigEndian.PutUint32(b[12:], uint32(epoch))
		b[16] = 2 // magic
		return b
	}
	b := append(append(batch(0, 3, 70), batch(1, 9, 61)...), batch(2, 4, 80)...)
	if got := completeBatches(b[:len(b)-5]); len(got) != 131 {
		t.Fatalf("completeBatches kept %d bytes of a partial tail, want 131", len(got))
	}
	if got := completeBatches(b); len(got) != len(b) {
		t.Fatalf("completeBatches dropped complete bytes")
	}
	// KAFKA-18723: nothing from the first batch above the fetch's epoch.
	for _, c := range []struct {
		epoch int32
		n     int
	}{{-1, len(b)}, {2, 0}, {3, 70}, {8, 70}, {9, len(b)}} {
		if got := notAbove(b, c.epoch); len(got) != c.n {
			t.Errorf("notAbove(epoch %d) kept %d bytes, want %d", c.epoch, len(got), c.n)
		}
	}
}
