package engine

import (
	"context"
	"slices"
	"testing"

	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
)

// mirrored returns b with its base offset and leader epoch set, as a mirror
// fetcher appends source batches.
func mirrored(b []byte, base int64, epoch int32) []byte {
	recordbatch.Batch(b).SetBaseOffset(base)
	recordbatch.Batch(b).SetLeaderEpoch(epoch)
	return b
}

// TestAbortOpenTransactionsAndBarrier: transactional batches copied by a
// mirror fetcher (two producers open, one committed) are aborted by
// AbortOpenTransactions; the producer barrier then resets producer state,
// and everything survives a restart.
func TestAbortOpenTransactionsAndBarrier(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	txn := func(pid int64, epoch int16, seq int32, base int64) []byte {
		return mirrored(mkBatch(t, batchOpts{pid: pid, epoch: epoch, seq: seq, attrs: recordbatch.AttrTransactional}, kv("k", "v")), base, 3)
	}
	commit := mirrored(controlBatch(7, 0, ControlCommit, 5, nowForTest()), 2, 3)
	appendOK(t, p, OriginCrossCluster, txn(7, 0, 0, 0))  // 0: pid 7, committed at 2
	appendOK(t, p, OriginCrossCluster, txn(8, 2, 0, 1))  // 1: pid 8, open
	appendOK(t, p, OriginCrossCluster, commit)           // 2
	appendOK(t, p, OriginCrossCluster, txn(9, 1, 10, 3)) // 3: pid 9, open
	if o := p.Offsets(); o.LastStable != 1 || o.HighWatermark != 4 {
		t.Fatalf("offsets with mirrored open transactions: %+v", o)
	}
	if ps := p.Producers(); len(ps) != 3 || ps[0].CoordinatorEpoch != 5 {
		t.Fatalf("producers %+v", ps)
	}

	pids, err := p.AbortOpenTransactions(context.Background())
	if err != nil || !slices.Equal(pids, []int64{8, 9}) {
		t.Fatalf("AbortOpenTransactions: %v %v", pids, err)
	}
	if o := p.Offsets(); o.LastStable != 6 || o.HighWatermark != 6 {
		t.Fatalf("offsets after abort: %+v", o)
	}
	res, err := p.Fetch(0, 1<<20, ReadCommitted)
	if err != nil || len(res.Batches) != 6 {
		t.Fatalf("read_committed: %v, %d batches", err, len(res.Batches))
	}
	want := []AbortedTxn{{ProducerID: 8, FirstOffset: 1}, {ProducerID: 9, FirstOffset: 3}}
	if !slices.Equal(res.AbortedTxns, want) {
		t.Fatalf("aborted %+v", res.AbortedTxns)
	}
	// The markers carry each producer's epoch: ABORT of pid 8 at epoch 2.
	if m := recordbatch.Batch(res.Batches[4]); !m.IsControl() || m.ProducerID() != 8 || m.ProducerEpoch() != 2 || controlType(m) != ControlAbort {
		t.Fatalf("marker at 4: pid %d epoch %d type %d", m.ProducerID(), m.ProducerEpoch(), controlType(m))
	}
	if again, err := p.AbortOpenTransactions(context.Background()); err != nil || len(again) != 0 {
		t.Fatalf("second AbortOpenTransactions: %v %v", again, err)
	}

	// A transaction opened after the aborts is still open at the barrier:
	// the barrier ends it in the aborted index.
	appendOK(t, p, OriginCrossCluster, txn(10, 0, 0, 6)) // 6
	at, err := p.WriteProducerBarrier(context.Background())
	if err != nil || at != 7 {
		t.Fatalf("barrier at %d: %v", at, err)
	}
	check := func(p *Partition) {
		t.Helper()
		if ps := p.Producers(); len(ps) != 0 {
			t.Fatalf("producers after the barrier: %+v", ps)
		}
		if o := p.Offsets(); o.LastStable != 8 || o.HighWatermark != 8 {
			t.Fatalf("offsets after the barrier: %+v", o)
		}
		want := []AbortedRange{{8, 1, 4}, {9, 3, 5}, {10, 6, 7}}
		if got := p.AbortedTxns(); !slices.Equal(got, want) {
			t.Fatalf("aborted index %+v", got)
		}
	}
	check(p)
	// A client producer reusing pid 9 at any sequence is accepted now.
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 9, epoch: 0, seq: 500}, kv("k", "v")))

	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if ps := p.Producers(); len(ps) != 1 || ps[0].ProducerID != 9 || ps[0].LastSequence != 500 {
		t.Fatalf("producers after restart %+v", ps)
	}
	if o := p.Offsets(); o.LastStable != 9 {
		t.Fatalf("offsets after restart %+v", o)
	}
	if got := p.AbortedTxns(); len(got) != 3 {
		t.Fatalf("aborted index after restart %+v", got)
	}
}

// TestStaleMarkerRejected: a marker older than the producer's epoch in the
// partition is refused (a coordinator that lost a fencing race).
func TestStaleMarkerRejected(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 4, epoch: 3, seq: 0, attrs: recordbatch.AttrTransactional}, kv("k", "v")))
	_, err := p.WriteTxnMarkers(context.Background(), Marker{ProducerID: 4, ProducerEpoch: 2, Commit: true})
	if kcode(err) != 47 { // INVALID_PRODUCER_EPOCH
		t.Fatalf("stale marker: %v", err)
	}
	if _, err := p.WriteTxnMarkers(context.Background(), Marker{ProducerID: 4, ProducerEpoch: 3, Commit: true}); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LastStable != 2 {
		t.Fatalf("offsets %+v", o)
	}
}

// TestMarkerEpochBump: under transaction.version 2 (KIP-890 part 2) the
// coordinator bumps the producer epoch at every end and writes the
// markers with the new epoch. The marker is accepted, makes the new
// epoch the producer's (also after a restart), fences the old epoch, and
// the next transaction starts at sequence 0 with the new epoch.
func TestMarkerEpochBump(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	txn := func(epoch int16, seq int32) []byte {
		return mkBatch(t, batchOpts{pid: 4, epoch: epoch, seq: seq, attrs: recordbatch.AttrTransactional}, kv("k", "v"))
	}
	appendOK(t, p, OriginClient, txn(3, 0))
	appendOK(t, p, OriginClient, txn(3, 1))
	if _, err := p.WriteTxnMarkers(context.Background(), Marker{ProducerID: 4, ProducerEpoch: 4, CoordinatorEpoch: 1, Commit: true}); err != nil {
		t.Fatalf("marker with the bumped epoch: %v", err)
	}
	check := func(p *Partition) {
		t.Helper()
		if o := p.Offsets(); o.LastStable != 3 || o.HighWatermark != 3 {
			t.Fatalf("offsets %+v", o)
		}
		if ps := p.Producers(); len(ps) != 1 || ps[0].ProducerEpoch != 4 || ps[0].CurrentTxnStartOffset != -1 {
			t.Fatalf("producers %+v", ps)
		}
		if kcode(appendErr(p, txn(3, 2))) != 47 { // INVALID_PRODUCER_EPOCH
			t.Fatal("a batch of the pre-bump epoch was accepted")
		}
		if kcode(appendErr(p, txn(4, 5))) != 45 { // OUT_OF_ORDER_SEQUENCE_NUMBER
			t.Fatal("the bumped epoch did not start its sequences afresh")
		}
	}
	check(p)
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	check(p)
	appendOK(t, p, OriginClient, txn(4, 0))
	if epoch, open := p.OpenTxn(4); !open || epoch != 4 {
		t.Fatalf("next transaction: open %v epoch %d", open, epoch)
	}
}

func nowForTest() time.Time { return time.UnixMilli(1_700_000_000_000) }

// TestTruncateReopensTransaction: a truncation that removes a
// transaction's COMMIT leaves its data open again, so that aborting the
// open transactions ends it with an ABORT read_committed consumers skip
// (a mirror's consistent cut truncates so, then aborts); a transaction
// whose data began before the walk's first segment is found too.
func TestTruncateReopensTransaction(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	cfg := DefaultLogConfig()
	cfg.SegmentBytes = 1 // a segment per batch: the walk goes back
	p := mkPart(t, e, cfg)
	txn := func(pid int64, epoch int16, seq int32, base int64) []byte {
		return mirrored(mkBatch(t, batchOpts{pid: pid, epoch: epoch, seq: seq, attrs: recordbatch.AttrTransactional}, kv("k", "v")), base, 3)
	}
	appendOK(t, p, OriginCrossCluster, txn(7, 0, 0, 0))                                                    // 0: pid 7
	appendOK(t, p, OriginCrossCluster, txn(7, 0, 1, 1))                                                    // 1: pid 7
	appendOK(t, p, OriginCrossCluster, mirrored(controlBatch(7, 1, ControlCommit, 5, nowForTest()), 2, 3)) // 2: COMMIT
	appendOK(t, p, OriginCrossCluster, txn(8, 0, 0, 3))                                                    // 3: pid 8
	appendOK(t, p, OriginCrossCluster, mirrored(controlBatch(8, 1, ControlCommit, 5, nowForTest()), 4, 3)) // 4: COMMIT
	if _, open := p.OpenTxn(7); open {
		t.Fatal("pid 7 open before the truncation")
	}
	if len(p.segs) < 5 {
		t.Fatalf("%d segments, want one per batch", len(p.segs))
	}
	if err := p.Truncate(2); err != nil { // the COMMIT of pid 7 goes, with pid 8's transaction
		t.Fatal(err)
	}
	if _, open := p.OpenTxn(7); !open {
		t.Fatal("pid 7's transaction is not open again after its COMMIT was truncated")
	}
	if _, open := p.OpenTxn(8); open {
		t.Fatal("pid 8 open, but its data went with the truncation")
	}
	if o := p.Offsets(); o.LastStable != 0 {
		t.Fatalf("offsets after the truncation: %+v", o)
	}
	pids, err := p.AbortOpenTransactions(context.Background())
	if err != nil || !slices.Equal(pids, []int64{7}) {
		t.Fatalf("AbortOpenTransactions: %v %v", pids, err)
	}
	res, err := p.Fetch(0, 1<<20, ReadCommitted)
	if err != nil {
		t.Fatal(err)
	}
	if want := []AbortedTxn{{ProducerID: 7, FirstOffset: 0}}; !slices.Equal(res.AbortedTxns, want) {
		t.Fatalf("aborted %+v, want %+v", res.AbortedTxns, want)
	}
}
