package fetch

import (
	"slices"
	"testing"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

func TestBatchHelpers(t *testing.T) {
	a, b, c := recordbatch.At(0, 3, "a"), recordbatch.At(1, 9, "b", "c"), recordbatch.At(3, 4, "d")
	all := slices.Concat(a, b, c)
	if got := trim(all[:len(all)-5], -1); len(got.keep) != len(a)+len(b) || got.whole != len(a)+len(b) || got.last.BaseOffset != 1 {
		t.Fatalf("trim kept %d bytes of a partial tail (whole %d, last at %d), want %d", len(got.keep), got.whole, got.last.BaseOffset, len(a)+len(b))
	}
	if got := trim(all, -1); len(got.keep) != len(all) || got.whole != len(all) {
		t.Fatalf("trim dropped complete bytes")
	}
	// KAFKA-18723: nothing from the first batch above the fetch's epoch.
	for _, tc := range []struct {
		epoch int32
		n     int
	}{{-1, len(all)}, {2, 0}, {3, len(a)}, {8, len(a)}, {9, len(all)}} {
		if got := trim(all, tc.epoch); len(got.keep) != tc.n || got.whole != len(all) {
			t.Errorf("trim(epoch %d) kept %d bytes of %d whole, want %d of %d", tc.epoch, len(got.keep), got.whole, tc.n, len(all))
		}
	}
}
