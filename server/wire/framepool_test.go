package wire

import "testing"

// TestFramePool checks the size classes: a recycled buffer comes back for
// any frame of its class, with the length asked for; small frames and odd
// capacities are not pooled.
func TestFramePool(t *testing.T) {
	var p FramePool
	a := p.Get(100 << 10)
	if len(a) != 100<<10 || cap(a) != 128<<10 {
		t.Fatalf("len %d cap %d", len(a), cap(a))
	}
	// sync.Pool may drop an item (it does at random under -race): retry.
	recycled := false
	for i := 0; i < 20 && !recycled; i++ {
		p.Put(a)
		b := p.Get(70 << 10)
		if len(b) != 70<<10 || cap(b) != 128<<10 {
			t.Fatalf("len %d cap %d", len(b), cap(b))
		}
		recycled, a = &b[:1][0] == &a[:1][0], b
	}
	if !recycled {
		t.Fatal("a returned buffer is never reused")
	}
	small := p.Get(100)
	if len(small) != 100 || cap(small) != 100 {
		t.Fatalf("small frame: len %d cap %d", len(small), cap(small))
	}
	p.Put(make([]byte, 100<<10)) // not a class size: dropped
	if c := p.Get(100 << 10); cap(c) != 128<<10 {
		t.Fatalf("cap %d", cap(c))
	}
}
