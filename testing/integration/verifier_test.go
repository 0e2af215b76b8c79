package integration

import (
	"strings"
	"testing"
)

// TestVerifierCatches makes sure the checks the client tests rely on do
// fail on gaps, duplicates, reordering, changed bytes and wrong offsets.
func TestVerifierCatches(t *testing.T) {
	const n = 12
	// A correct run: records 0..n-1 over numPartitions partitions in order.
	good := func(v *verifier) {
		next := map[int32]int64{}
		for i := range n {
			p := int32(i % numPartitions)
			k, val, h := genRecord(i)
			v.add(p, next[p], k, val, h)
			next[p]++
		}
	}
	acked := func() []pos {
		a := make([]pos, n)
		for i := range n {
			a[i] = pos{int32(i % numPartitions), int64(i / numPartitions)}
		}
		return a
	}
	ends := map[int32]int64{}
	for p := range int32(numPartitions) {
		ends[p] = n / numPartitions
	}
	v := newVerifier(n, true, acked())
	good(v)
	if err := v.check(ends); err != nil {
		t.Fatalf("a correct run: %v", err)
	}

	for _, c := range []struct {
		name, want string
		run        func(v *verifier)
	}{
		{"gap", "gap", func(v *verifier) {
			k, val, h := genRecord(0)
			v.add(0, 1, k, val, h)
		}},
		{"duplicate", "seen twice", func(v *verifier) {
			for off := range int64(2) {
				k, val, h := genRecord(0)
				v.add(0, off, k, val, h)
			}
		}},
		{"reorder", "out of order", func(v *verifier) {
			for off, i := range []int{6, 0} {
				k, val, h := genRecord(i)
				v.add(0, int64(off), k, val, h)
			}
		}},
		{"value", "value differs", func(v *verifier) {
			k, val, h := genRecord(0)
			val[3] ^= 1
			v.add(0, 0, k, val, h)
		}},
		{"headers", "headers", func(v *verifier) {
			k, val, _ := genRecord(1)
			v.add(1, 0, k, val, nil)
		}},
		{"acked elsewhere", "acknowledged at", func(v *verifier) {
			k, val, h := genRecord(0)
			v.add(1, 0, k, val, h)
		}},
		{"missing", "never read", func(v *verifier) {}},
	} {
		v := newVerifier(n, true, acked())
		c.run(v)
		if err := v.check(ends); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a problem mentioning %q", c.name, err, c.want)
		}
	}
}
