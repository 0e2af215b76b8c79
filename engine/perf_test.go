package engine

import (
	"bytes"
	"context"
	"testing"
)

// TestAppendOwned checks that handed-over records are stored without a
// copy (the tail serves the caller's buffer, offsets written into it) and
// that a copy is made otherwise.
func TestAppendOwned(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	first := mkBatch(t, batchOpts{}, kv("a", "1"))
	orig := bytes.Clone(first)
	if _, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: first, Acks: -1}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, orig) {
		t.Fatal("a records slice that was not handed over was modified")
	}
	owned := mkBatch(t, batchOpts{}, kv("b", "2"), kv("c", "3"))
	res, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: owned, Acks: -1, Owned: true})
	if err != nil || res.BaseOffset != 1 {
		t.Fatalf("append: %+v %v", res, err)
	}
	got := fetchAll(t, p, 0)
	if len(got) != 2 || &got[1][0] != &owned[0] || batch(owned).baseOffset() != 1 {
		t.Fatalf("owned batch not kept as it is: %d batches, base offset %d", len(got), batch(owned).baseOffset())
	}
	if &got[0][0] == &first[0] {
		t.Fatal("the tail aliases records that were not handed over")
	}
	if m := recordsOf(t, got); m[0] != "a=1" || m[2] != "c=3" {
		t.Fatalf("records %v", m)
	}
}

// TestAppendAsyncPipelined runs two appends before waiting for either: the
// second is ordered after the first, nothing is visible before a wait, and
// waiting for the later one covers the earlier one too (Pebble syncs in
// commit order).
func TestAppendAsyncPipelined(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	ctx := context.Background()
	w1 := p.AppendAsync(ctx, &AppendRequest{Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")), Acks: -1})
	w2 := p.AppendAsync(ctx, &AppendRequest{Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("c", "3")), Acks: -1})
	if o := p.Offsets(); o.LogEnd != 3 || o.HighWatermark != 0 {
		t.Fatalf("before the waits: %+v", o)
	}
	r2, err := w2()
	if err != nil || r2.BaseOffset != 2 || r2.LastOffset != 2 {
		t.Fatalf("second append: %+v %v", r2, err)
	}
	if hwm := p.Offsets().HighWatermark; hwm != 3 {
		t.Fatalf("high watermark %d after the second sync", hwm)
	}
	r1, err := w1()
	if err != nil || r1.BaseOffset != 0 || r1.LastOffset != 1 {
		t.Fatalf("first append: %+v %v", r1, err)
	}
	// A rejected append reports its error from wait, and changes nothing.
	if _, err := p.AppendAsync(ctx, &AppendRequest{Origin: OriginClient, Records: []byte{1, 2, 3}, Acks: -1})(); err == nil {
		t.Fatal("garbage appended")
	}
	if m := recordsOf(t, fetchAll(t, p, 0)); len(m) != 3 || m[2] != "c=3" {
		t.Fatalf("records %v", m)
	}
}
