package recordbatch

import (
	"hash/crc32"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRoundTrip reads back what Of and At wrote: the values, their
// offsets, and At's base offset and leader epoch, with a valid CRC.
func TestRoundTrip(t *testing.T) {
	b := append(Of("a", "b"), At(2, 7, "c")...)
	offsets, values := Values(t, b)
	if !slices.Equal(offsets, []int64{0, 1, 2}) || !slices.Equal(values, []string{"a", "b", "c"}) {
		t.Fatalf("read back offsets %v values %v", offsets, values)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(At(5, 9, "x")); err != nil {
		t.Fatal(err)
	}
	if rb.FirstOffset != 5 || rb.PartitionLeaderEpoch != 9 || rb.NumRecords != 1 {
		t.Fatalf("At(5, 9): offset %d epoch %d records %d", rb.FirstOffset, rb.PartitionLeaderEpoch, rb.NumRecords)
	}
	raw := At(5, 9, "x")
	if got := crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)); got != uint32(rb.CRC) {
		t.Fatalf("CRC %x, the batch's is %x", uint32(rb.CRC), got)
	}
}
