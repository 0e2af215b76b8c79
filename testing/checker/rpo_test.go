package checker

import "testing"

// TestLost: acknowledged records split at the destination end and at the
// learned source end; the time is the span the records given up cover:
// the newest record below the learned end minus the first one newer than
// everything below the destination end.
func TestLost(t *testing.T) {
	acked := []Acked{{0, "a", 100}, {1, "b", 110}, {2, "c", 130}, {3, "d", 170}, {4, "e", 200}}
	for _, c := range []struct {
		name           string
		dstEnd, srcEnd int64
		want           Loss
	}{
		{"caught up, source end learned", 5, 5, Loss{}},
		{"behind, all known", 2, 5, Loss{Known: 3, KnownMs: 200 - 130, Missing: 3}},
		{"behind, part known", 2, 4, Loss{Known: 2, KnownMs: 170 - 130, Beyond: 1, Missing: 3}},
		{"caught up with an old end", 3, 3, Loss{Beyond: 2, Missing: 2}},
		{"end never learned", 3, -1, Loss{Beyond: 2, Missing: 2}},
		{"nothing mirrored", 0, 2, Loss{Known: 2, KnownMs: -1, Beyond: 3, Missing: 5}},
		{"one record given up", 3, 4, Loss{Known: 1, KnownMs: 1, Beyond: 1, Missing: 2}},
	} {
		if got := Lost(acked, c.dstEnd, c.srcEnd); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	same := []Acked{{0, "a", 100}, {1, "b", 100}}
	if got := Lost(same, 1, 2); got.KnownMs != 1 {
		t.Errorf("a record behind in the same millisecond: %+v, want 1 ms (behind is never 0)", got)
	}
	var a Acks
	a.Add(0, Acked{2, "y", 3})
	a.Add(0, Acked{1, "x", 2})
	a.Add(1, Acked{0, "z", 1})
	if got := a.Partition(0); a.Len() != 3 || len(got) != 2 || got[0].Offset != 1 || got[1].Offset != 2 {
		t.Errorf("Acks: %d, partition 0 %+v", a.Len(), got)
	}
}
