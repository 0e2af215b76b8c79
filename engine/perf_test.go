package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
)

// TestAppendCopiesOnce checks that an append leaves the caller's records
// untouched and that the log holds the stored copy, with offsets set.
func TestAppendCopiesOnce(t *testing.T) {
	e := openTest(t, nil)
	cfg := DefaultLogConfig()
	cfg.LogAppendTime = true
	p := mkPart(t, e, cfg)
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1")))
	records := append(mkBatch(t, batchOpts{}, kv("b", "2")), mkBatch(t, batchOpts{}, kv("c", "3"), kv("d", "4"))...)
	orig := bytes.Clone(records)
	if res := appendOK(t, p, OriginClient, records); res.BaseOffset != 1 || res.LastOffset != 3 {
		t.Fatalf("append: %+v", res)
	}
	if !bytes.Equal(records, orig) {
		t.Fatal("the caller's records were modified")
	}
	got := fetchAll(t, p, 0)
	if len(got) != 3 || &got[1][0] == &records[0] {
		t.Fatalf("%d batches; a read aliases the caller's records: %v", len(got), len(got) == 3)
	}
	for i, want := range []int64{0, 1, 2} {
		b := recordbatch.Batch(got[i])
		if b.BaseOffset() != want || !b.LogAppendTime() {
			t.Fatalf("batch %d: base offset %d, log append time %v", i, b.BaseOffset(), b.LogAppendTime())
		}
		if _, err := recordbatch.Split(got[i]); err != nil { // the CRC covers the stamped time
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if m := recordsOf(t, got); m[0] != "a=1" || m[1] != "b=2" || m[3] != "d=4" {
		t.Fatalf("records %v", m)
	}
}

// TestAppendAsyncPipelined runs two appends before waiting for either: the
// second is ordered after the first, both are in the log before a wait,
// and waiting for the later one covers the earlier one too (one sync round
// takes both). Both waits run before any check: an append not waited for
// keeps the engine from closing.
func TestAppendAsyncPipelined(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	ctx := context.Background()
	w1 := p.AppendAsync(ctx, &AppendRequest{Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")), Acks: -1})
	w2 := p.AppendAsync(ctx, &AppendRequest{Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("c", "3")), Acks: -1})
	before := p.Offsets() // a sync round may already have made one or both visible
	r2, err2 := w2()
	hwm := p.Offsets().HighWatermark
	r1, err1 := w1()
	if h := before.HighWatermark; before.LogEnd != 3 || h != 0 && h != 2 && h != 3 {
		t.Fatalf("before the waits: %+v", before)
	}
	if err2 != nil || r2.BaseOffset != 2 || r2.LastOffset != 2 {
		t.Fatalf("second append: %+v %v", r2, err2)
	}
	if hwm != 3 {
		t.Fatalf("high watermark %d after the second sync", hwm)
	}
	if err1 != nil || r1.BaseOffset != 0 || r1.LastOffset != 1 {
		t.Fatalf("first append: %+v %v", r1, err1)
	}
	// A rejected append reports its error from wait, and changes nothing.
	if _, err := p.AppendAsync(ctx, &AppendRequest{Origin: OriginClient, Records: []byte{1, 2, 3}, Acks: -1})(); err == nil {
		t.Fatal("garbage appended")
	}
	if m := recordsOf(t, fetchAll(t, p, 0)); len(m) != 3 || m[2] != "c=3" {
		t.Fatalf("records %v", m)
	}
}
