package engine

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestIdempotentProducer(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	pb := func(epoch int16, seq int32, n int) []byte {
		recs := make([]rec, n)
		for i := range recs {
			recs[i] = kv("k", "v")
		}
		return mkBatch(t, batchOpts{pid: 42, epoch: epoch, seq: seq}, recs...)
	}
	r0 := appendOK(t, p, OriginClient, pb(0, 0, 2)) // seq 0-1, offsets 0-1
	r1 := appendOK(t, p, OriginClient, pb(0, 2, 3)) // seq 2-4, offsets 2-4
	// Retries of either batch: success with the original offsets, nothing appended.
	for _, tc := range []struct {
		b    []byte
		want AppendResult
	}{{pb(0, 0, 2), r0}, {pb(0, 2, 3), r1}} {
		res := appendOK(t, p, OriginClient, tc.b)
		if !res.Duplicate || res.BaseOffset != tc.want.BaseOffset || res.LastOffset != tc.want.LastOffset {
			t.Fatalf("retry: %+v, want offsets of %+v", res, tc.want)
		}
	}
	if p.Offsets().LogEnd != 5 {
		t.Fatalf("duplicates appended: log end %d", p.Offsets().LogEnd)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		code int16
	}{
		{"gap", pb(0, 6, 1), kerr.OutOfOrderSequenceNumber.Code},
		{"overlap", pb(0, 4, 2), kerr.OutOfOrderSequenceNumber.Code},
		{"new epoch not at 0", pb(1, 5, 1), kerr.OutOfOrderSequenceNumber.Code},
	} {
		if err := appendErr(p, tc.b); kcode(err) != tc.code {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// A request whose second batch fails leaves the first one's sequence unused.
	two := append(pb(0, 5, 1), pb(0, 9, 1)...)
	if err := appendErr(p, two); kcode(err) != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("two batches: %v", err)
	}
	if res := appendOK(t, p, OriginClient, pb(0, 5, 1)); res.Duplicate || res.BaseOffset != 5 {
		t.Fatalf("seq 5 after a rejected request: %+v", res)
	}
	// Restart: state survives exactly.
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if res := appendOK(t, p, OriginClient, pb(0, 5, 1)); !res.Duplicate || res.BaseOffset != 5 {
		t.Fatalf("retry after reopen: %+v", res)
	}
	if err := appendErr(p, pb(0, 7, 1)); kcode(err) != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap after reopen: %v", err)
	}
	// A new epoch starts at 0; the old epoch is then fenced.
	appendOK(t, p, OriginClient, pb(1, 0, 1))
	if err := appendErr(p, pb(0, 6, 1)); kcode(err) != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("old epoch: %v", err)
	}
	ps := p.Producers()
	if len(ps) != 1 || ps[0].ProducerEpoch != 1 || ps[0].LastSequence != 0 || ps[0].CurrentTxnStartOffset != -1 {
		t.Fatalf("producers %+v", ps)
	}
	// Only the last 5 batches are remembered; a retry of an older one is out of order.
	for i := int32(1); i <= 6; i++ {
		appendOK(t, p, OriginClient, pb(1, i, 1))
	}
	if err := appendErr(p, pb(1, 1, 1)); kcode(err) != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("retry of a forgotten batch: %v", err)
	}
	// Sequence wraps at MaxInt32.
	q, _ := e.Create("w", TopicID{5}, 0, DefaultLogConfig())
	appendOK(t, q, OriginClient, mkBatch(t, batchOpts{pid: 7, seq: math.MaxInt32}, kv("a", "1")))
	appendOK(t, q, OriginClient, mkBatch(t, batchOpts{pid: 7, seq: 0}, kv("a", "1")))
	// Transactions: the open transaction's start offset is tracked.
	tx, _ := e.Create("tx", TopicID{6}, 0, DefaultLogConfig())
	appendOK(t, tx, OriginClient, mkBatch(t, batchOpts{pid: 8, seq: 0, attrs: recordbatch.AttrTransactional}, kv("a", "1")))
	appendOK(t, tx, OriginClient, mkBatch(t, batchOpts{pid: 8, seq: 1, attrs: recordbatch.AttrTransactional}, kv("a", "1")))
	if ps := tx.Producers(); ps[0].CurrentTxnStartOffset != 0 {
		t.Fatalf("txn start %+v", ps)
	}
	marker := mkBatch(t, batchOpts{pid: 8, seq: -1, attrs: recordbatch.AttrTransactional | recordbatch.AttrControl}, rec{key: []byte{0, 0, 0, 1}, val: []byte{0, 0, 0, 0, 0, 0}})
	if _, err := tx.Append(context.Background(), &AppendRequest{Origin: OriginInternal, Records: marker, Acks: -1}); err != nil {
		t.Fatal(err)
	}
	if ps := tx.Producers(); ps[0].CurrentTxnStartOffset != -1 {
		t.Fatalf("txn still open after the marker %+v", ps)
	}
}

// TestTransactions checks the last stable offset and the aborted
// transaction index that read_committed fetches use.
func TestTransactions(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	txnBatch := func(pid int64, seq int32) []byte {
		return mkBatch(t, batchOpts{pid: pid, seq: seq, attrs: recordbatch.AttrTransactional}, kv("k", "v"))
	}
	marker := func(pid int64, typ byte) []byte {
		return mkBatch(t, batchOpts{pid: pid, seq: -1, attrs: recordbatch.AttrTransactional | recordbatch.AttrControl},
			rec{key: []byte{0, 0, 0, typ}, val: []byte{0, 0, 0, 0, 0, 0}})
	}
	internal := func(b []byte) {
		if _, err := p.Append(context.Background(), &AppendRequest{Origin: OriginInternal, Records: b, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	appendOK(t, p, OriginClient, txnBatch(8, 0))                            // 0
	appendOK(t, p, OriginClient, txnBatch(8, 1))                            // 1
	internal(marker(8, 0))                                                  // 2: ABORT
	appendOK(t, p, OriginClient, txnBatch(8, 2))                            // 3
	internal(marker(8, 1))                                                  // 4: COMMIT
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("plain", "x"))) // 5
	appendOK(t, p, OriginClient, txnBatch(9, 0))                            // 6: still open
	check := func() {
		t.Helper()
		if o := p.Offsets(); o.LastStable != 6 || o.HighWatermark != 7 {
			t.Fatalf("offsets %+v", o)
		}
		res, err := p.Fetch(0, 1<<20, ReadCommitted)
		if err != nil || len(res.Batches) != 6 || res.LastStableOffset != 6 {
			t.Fatalf("read_committed: %v, %d batches, %+v", err, len(res.Batches), res)
		}
		if len(res.AbortedTxns) != 1 || res.AbortedTxns[0] != (AbortedTxn{ProducerID: 8, FirstOffset: 0}) {
			t.Fatalf("aborted %+v", res.AbortedTxns)
		}
		if res, _ := p.Fetch(3, 1<<20, ReadCommitted); len(res.AbortedTxns) != 0 || len(res.Batches) != 3 {
			t.Fatalf("read_committed from 3: %+v", res)
		}
		if res, _ := p.Fetch(6, 1<<20, ReadCommitted); len(res.Batches) != 0 {
			t.Fatal("read_committed returned the open transaction")
		}
		if res, _ := p.Fetch(0, 1<<20, ReadUncommitted); len(res.Batches) != 7 || len(res.AbortedTxns) != 0 {
			t.Fatalf("read_uncommitted: %d batches", len(res.Batches))
		}
	}
	check()
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	check()
	// Truncating the open transaction away makes everything stable.
	if err := p.Truncate(6); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LastStable != 6 || o.HighWatermark != 6 {
		t.Fatalf("after truncate %+v", o)
	}
	// Deleting below the aborted transaction's end drops it from the index.
	if _, err := p.DeleteRecords(3); err != nil {
		t.Fatal(err)
	}
	if res, _ := p.Fetch(3, 1<<20, ReadCommitted); len(res.AbortedTxns) != 0 || len(p.aborted) != 0 {
		t.Fatalf("aborted index after DeleteRecords: %+v", p.aborted)
	}
}

// TestDuplicateWaitsForTheOriginal: an idempotent producer's retry of a
// batch that is written but not yet durable (its first request timed
// out at the client while the sync ran) is a duplicate, answered with
// the original's offsets; with acks it is answered only once the
// original is durable and under the high watermark, as the original's
// answer would have been. Before, the duplicate was answered at once: a
// producer's acknowledged record could be above the high watermark, and
// lost in a crash.
func TestDuplicateWaitsForTheOriginal(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the engine's Close, which waits for the held sync
	e.testHook = func(point string) {
		if point == "sync:before" {
			select {
			case held <- struct{}{}:
				<-hold
			default:
			}
		}
	}
	b := mkBatch(t, batchOpts{pid: 7, seq: 0}, kv("k", "v"))
	first, err := p.Write(context.Background(), &AppendRequest{Origin: OriginClient, Records: b, Acks: -1})
	if err != nil {
		t.Fatal(err)
	}
	<-held // the original's sync has started and is held
	retry, err := p.Write(context.Background(), &AppendRequest{Origin: OriginClient, Records: b, Acks: -1})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan AppendResult, 1)
	go func() {
		res, err := retry()
		if err != nil {
			t.Error(err)
		}
		answered <- res
	}()
	var res AppendResult
	select {
	case res = <-answered:
		t.Errorf("the duplicate was answered (%+v) while its original was not durable; high watermark %d", res, p.Offsets().HighWatermark)
		release()
	case <-time.After(100 * time.Millisecond):
		release()
		res = <-answered
	}
	if _, err := first(); err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || res.BaseOffset != 0 {
		t.Fatalf("retry answered %+v, want the original's offset 0 as a duplicate", res)
	}
	if hw := p.Offsets().HighWatermark; hw < res.LastOffset+1 {
		t.Fatalf("duplicate answered with the high watermark at %d, below its offset %d", hw, res.LastOffset)
	}
}
