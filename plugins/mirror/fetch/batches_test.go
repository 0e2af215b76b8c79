package fetch

import (
	"slices"
	"testing"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

func TestBatchHelpers(t *testing.T) {
	a, b, c := recordbatch.At(0, 3, "a"), recordbatch.At(1, 9, "b", "c"), recordbatch.At(3, 4, "d")
	all := slices.Concat(a, b, c)
	if got := completeBatches(all[:len(all)-5]); len(got) != len(a)+len(b) {
		t.Fatalf("completeBatches kept %d bytes of a partial tail, want %d", len(got), len(a)+len(b))
	}
	if got := completeBatches(all); len(got) != len(all) {
		t.Fatalf("completeBatches dropped complete bytes")
	}
	// KAFKA-18723: nothing from the first batch above the fetch's epoch.
	for _, tc := range []struct {
		epoch int32
		n     int
	}{{-1, len(all)}, {2, 0}, {3, len(a)}, {8, len(a)}, {9, len(all)}} {
		if got := notAbove(all, tc.epoch); len(got) != tc.n {
			t.Errorf("notAbove(epoch %d) kept %d bytes, want %d", tc.epoch, len(got), tc.n)
		}
	}
}
