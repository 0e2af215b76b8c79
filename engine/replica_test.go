package engine

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReplicatedHighWatermark: a replicated partition's high watermark
// goes only as far as the replication layer allows and no further than
// the durable end; followers read past it; a restart starts from the
// checkpoint, not from the log end.
func TestReplicatedHighWatermark(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	b := func() []byte { return mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")) }
	appendOK(t, p, OriginClient, b()) // 0-1, committed alone
	if err := p.SetReplicated(true); err != nil {
		t.Fatal(err)
	}
	appendOK(t, p, OriginClient, b()) // 2-3
	appendOK(t, p, OriginClient, b()) // 4-5
	if o := p.Offsets(); o.HighWatermark != 2 || o.LogEnd != 6 {
		t.Fatalf("appends moved the high watermark of a replicated partition: %+v", o)
	}
	if got := recordsOf(t, fetchAll(t, p, 0)); len(got) != 2 {
		t.Fatalf("consumers read above the high watermark: %v", got)
	}
	res, err := p.Fetch(2, 1<<20, ReadLogEnd)
	if err != nil || len(res.Batches) != 2 || res.HighWatermark != 2 {
		t.Fatalf("follower read: %d batches, hwm %d, err %v", len(res.Batches), res.HighWatermark, err)
	}
	if got := p.SetHighWatermark(4); got != 4 {
		t.Fatalf("high watermark %d, want 4", got)
	}
	if got := p.SetHighWatermark(math.MaxInt64); got != 6 {
		t.Fatalf("high watermark %d, want the durable end 6", got)
	}
	if got := p.SetHighWatermark(3); got != 6 {
		t.Fatalf("high watermark went down to %d", got)
	}
	if p.LastFetchedEpoch() != 0 {
		t.Fatalf("last fetched epoch %d", p.LastFetchedEpoch())
	}
	// The checkpoint is what a restart starts from.
	p.SetHighWatermark(4) // nothing: 6 stays
	if err := p.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	appendOK(t, p, OriginClient, b()) // 6-7, never committed
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if o := p.Offsets(); o.HighWatermark != 8 {
		t.Fatalf("reopened, not replicated yet: %+v", o)
	}
	if err := p.SetReplicated(true); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.HighWatermark != 6 || o.LogEnd != 8 {
		t.Fatalf("restarted replica: %+v, want the checkpointed high watermark 6", o)
	}
	if err := p.Truncate(6); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogEnd != 6 || o.HighWatermark != 6 {
		t.Fatalf("after truncation: %+v", o)
	}
}

// TestReplicatedTruncateBelowHighWatermark: a leader's log cut below its
// high watermark (a mirror partition's failback truncation) does not get
// the old high watermark back at the next advance: a high watermark above
// the log end kept a follower that had everything out of the ISR.
func TestReplicatedTruncateBelowHighWatermark(t *testing.T) {
	e := openTest(t, vfs.NewMem())
	p := mkPart(t, e, DefaultLogConfig())
	if err := p.SetReplicated(true); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")))
	}
	if got := p.SetHighWatermark(6); got != 6 {
		t.Fatalf("high watermark %d, want 6", got)
	}
	if err := p.Truncate(2); err != nil {
		t.Fatal(err)
	}
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("c", "3"))) // 2
	p.SetHighWatermark(3)
	if o := p.Offsets(); o.LogEnd != 3 || o.HighWatermark != 3 {
		t.Fatalf("after truncating to 2 and appending one record: %+v, want log end and high watermark 3", o)
	}
}

// A follower whose log ends below its leader's log start empties its log
// and starts it over at the leader's start; the log continues from there
// and stays so across a restart.
func TestStartOverAboveLogEnd(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	if err := p.SetReplicated(true); err != nil {
		t.Fatal(err)
	}
	p.SetLeaderEpoch(2)
	for i := range 3 {
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 7, seq: int32(i)}, kv("a", "1")))
	}
	p.SetHighWatermark(3)
	if err := p.StartOver(100); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 100 || o.LogEnd != 100 || o.HighWatermark != 100 {
		t.Fatalf("after starting over at 100: %+v, want log start, end and high watermark 100", o)
	}
	if ep := p.LastFetchedEpoch(); ep != -1 {
		t.Fatalf("last fetched epoch of the empty log %d, want -1", ep)
	}
	if n := len(p.Producers()); n != 0 {
		t.Fatalf("%d producers kept after starting over", n)
	}
	// The leader's batch at 100, epoch 5, as a follower appends it.
	b := mkBatch(t, batchOpts{pid: 7, seq: 40}, kv("b", "2"), kv("c", "3"))
	binary.BigEndian.PutUint64(b, 100)
	binary.BigEndian.PutUint32(b[12:], 5)
	appendOK(t, p, OriginReplica, b)
	p.SetHighWatermark(102)
	if o := p.Offsets(); o.LogEnd != 102 || o.HighWatermark != 102 {
		t.Fatalf("after the leader's batch: %+v", o)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if o := p.Offsets(); o.LogStart != 100 || o.LogEnd != 102 {
		t.Fatalf("after a restart: %+v, want log start 100, end 102", o)
	}
	got := recordsOf(t, fetchAll(t, p, 100))
	if len(got) != 2 || got[100] != "b=2" || got[101] != "c=3" {
		t.Fatalf("records after a restart: %v", got)
	}
	if ep, end := p.EndOffsetForEpoch(5); ep != 5 || end != 102 {
		t.Fatalf("EndOffsetForEpoch(5) = %d, %d, want 5, 102", ep, end)
	}
}
