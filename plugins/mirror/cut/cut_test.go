package cut

import (
	"context"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine"
)

// data and txn build batches of one record at offset o, time ts.
func data(o, ts int64) Batch { return Batch{Base: o, Last: o, MaxTs: ts, PID: -1, Records: 1} }
func txn(o, ts, pid int64, e int16) Batch {
	return Batch{Base: o, Last: o, MaxTs: ts, PID: pid, Epoch: e, Txn: true, Records: 1}
}
func marker(o, ts, pid int64, e int16, commit bool) Batch {
	return Batch{Base: o, Last: o, MaxTs: ts, PID: pid, Epoch: e, Txn: true, Control: true, Commit: commit}
}

func held(bs ...Batch) Part {
	end := int64(0)
	if len(bs) > 0 {
		end = bs[len(bs)-1].Last + 1
	}
	return Part{Batches: bs, End: end, Stable: stableOf(bs, end)}
}

// stableOf is the last stable offset of a log of batches ending at end,
// as the engine keeps it: the first offset of its oldest transaction
// still open, or end.
func stableOf(bs []Batch, end int64) int64 {
	first := map[int64]int64{} // producer ID to its open transaction's first offset
	for _, b := range bs {
		switch {
		case b.Control:
			delete(first, b.PID)
		case b.Txn:
			if _, ok := first[b.PID]; !ok {
				first[b.PID] = b.Base
			}
		}
	}
	stable := end
	for _, off := range first {
		stable = min(stable, off)
	}
	return stable
}

// T is the least of the partitions' latest times, and each partition is
// cut at its first record past T.
func TestConsistentCutTime(t *testing.T) {
	parts := []Part{
		held(data(0, 100), data(1, 200), data(2, 300), data(3, 400)),
		held(data(0, 150), data(1, 250)),
		held(), // holds nothing: no constraint
	}
	ts, cuts := Consistent(parts)
	if ts != 250 || !slices.Equal(cuts, []int64{2, 2, 0}) {
		t.Fatalf("T %d cuts %v, want 250 [2 2 0]", ts, cuts)
	}
	if r, ms := Loss(parts[0], cuts[0], ts); r != 2 || ms != 150 {
		t.Fatalf("loss %d records %d ms, want 2 and 150", r, ms)
	}
	if r, ms := Loss(parts[1], cuts[1], ts); r != 0 || ms != 0 {
		t.Fatalf("loss %d records %d ms, want none", r, ms)
	}
}

// A transaction whose COMMIT is below the cut on one partition but beyond
// it on another loses its COMMIT on both, and the lower cut that makes
// splits a second transaction, which the closure also resolves.
func TestConsistentCutClosesTransactions(t *testing.T) {
	// Producer 7: transaction epoch 1 on A and B. On A it is committed at
	// time 200; on B its marker comes at 260, past T.
	// Producer 8: transaction epoch 4 on A (after 7's data) and C, whole
	// below T on C, but on A its data follows 7's, so cutting A at 7's
	// first batch splits it.
	a := held(txn(0, 100, 7, 1), txn(1, 110, 8, 4), marker(2, 200, 7, 2, true), marker(3, 205, 8, 5, true), data(4, 250))
	b := held(txn(0, 120, 7, 1), data(1, 240), marker(2, 260, 7, 2, true), data(3, 270))
	c := held(txn(0, 115, 8, 4), marker(1, 205, 8, 5, true), data(2, 245))
	ts, cuts := Consistent([]Part{a, b, c})
	if ts != 245 {
		t.Fatalf("T %d, want 245", ts)
	}
	// A: 7's transaction is split (COMMIT beyond B's cut), so A is cut at
	// 7's first batch (0), which drops 8's data on A; then 8 is split and
	// C is cut at 8's first batch. B keeps 7's open data, which the stop
	// aborts.
	if !slices.Equal(cuts, []int64{0, 2, 0}) {
		t.Fatalf("cuts %v, want [0 2 0]", cuts)
	}
	// Every transaction is whole below the cuts or on none.
	committed, pending, _ := txnsBelow([]Part{a, b, c}, cuts)
	for _, id := range []txnID{{7, 1}, {8, 4}} {
		on := 0
		for i := range committed {
			if committed[i][id] {
				on++
			}
		}
		if on != 0 && slices.ContainsFunc(pending, func(m map[txnID]bool) bool { return m[id] }) {
			t.Fatalf("transaction %v split: committed on %d partitions", id, on)
		}
	}
}

// Transactions committed below T everywhere stay; aborted ones and
// non-transactional records need nothing.
func TestConsistentCutKeepsWholeTransactions(t *testing.T) {
	a := held(txn(0, 100, 7, 1), marker(1, 150, 7, 2, true), txn(2, 160, 7, 2), marker(3, 170, 7, 3, false), data(4, 300))
	b := held(txn(0, 105, 7, 1), marker(1, 150, 7, 2, true), data(2, 280))
	ts, cuts := Consistent([]Part{a, b})
	if ts != 280 || !slices.Equal(cuts, []int64{4, 3}) {
		t.Fatalf("T %d cuts %v, want 280 [4 3]", ts, cuts)
	}
}

// Held reads a real partition's markers as COMMIT or ABORT.
func TestHeldMarkers(t *testing.T) {
	e, err := engine.Open(engine.Config{Dir: "/data", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ep, err := e.Create("t", engine.TopicID{1}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ep.WriteTxnMarkers(ctx, engine.Marker{ProducerID: 7, ProducerEpoch: 1, Commit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ep.WriteTxnMarkers(ctx, engine.Marker{ProducerID: 8, ProducerEpoch: 2}); err != nil {
		t.Fatal(err)
	}
	p, err := Held(ep, 0, ep.Offsets().LogEnd)
	if err != nil {
		t.Fatal(err)
	}
	if p.End != 2 || len(p.Batches) != 2 {
		t.Fatalf("end %d, %d batches, want 2 and 2", p.End, len(p.Batches))
	}
	c, a := p.Batches[0], p.Batches[1]
	if !c.Control || !c.Commit || c.PID != 7 || c.Epoch != 1 || !a.Control || a.Commit || a.PID != 8 || a.Base != 1 {
		t.Fatalf("batches %+v", p.Batches)
	}
}

// An idle partition is complete up to when it last held all the source
// had, not only up to its last record: it does not drag T back.
func TestConsistentCutIdlePartition(t *testing.T) {
	busy := held(data(0, 100), data(1, 200), data(2, 300))
	idle := held(data(0, 50))
	if ts, cuts := Consistent([]Part{busy, idle}); ts != 50 || !slices.Equal(cuts, []int64{0, 1}) {
		t.Fatalf("without Complete: T %d cuts %v, want 50 [0 1]", ts, cuts)
	}
	idle.Complete = 250
	if ts, cuts := Consistent([]Part{busy, idle}); ts != 250 || !slices.Equal(cuts, []int64{2, 1}) {
		t.Fatalf("with Complete: T %d cuts %v, want 250 [2 1]", ts, cuts)
	}
}

// Under transaction version 1 one (producer, epoch) names every
// transaction of a session: if one of them is split, no transaction of
// the session is kept anywhere.
func TestConsistentCutVersion1(t *testing.T) {
	// Session (7, 1): a transaction committed on both partitions, then
	// one committed on A below T but whose COMMIT on B is past T.
	a := held(txn(0, 100, 7, 1), marker(1, 110, 7, 1, true), txn(2, 120, 7, 1), marker(3, 130, 7, 1, true), data(4, 300))
	b := held(txn(0, 101, 7, 1), marker(1, 110, 7, 1, true), txn(2, 121, 7, 1), data(3, 200), marker(4, 250, 7, 1, true))
	ts, cuts := Consistent([]Part{a, b})
	if ts != 250 {
		t.Fatalf("T %d, want 250", ts)
	}
	// T keeps all of A below 300 and all of B: the second transaction
	// is whole, nothing is split, nothing goes.
	if !slices.Equal(cuts, []int64{4, 5}) {
		t.Fatalf("cuts %v, want [4 5]", cuts)
	}
	a.Batches[4].MaxTs, b.Batches[4].MaxTs = 255, 260 // T 255, B's second COMMIT past it
	ts, cuts = Consistent([]Part{a, b})
	// T = 255: B's second COMMIT (260) is past it, so the second
	// transaction is split; the session's transactions cannot be told
	// apart, so every partition goes back to the session's first batch.
	if ts != 255 || !slices.Equal(cuts, []int64{0, 0}) {
		t.Fatalf("T %d cuts %v, want 255 [0 0]", ts, cuts)
	}
}

// A cut at a window's first batch, or at a transaction whose producer
// has no marker earlier in the window, needs a longer window.
func TestCutShort(t *testing.T) {
	p := held(data(10, 100), txn(11, 110, 7, 1), marker(12, 120, 7, 2, true), txn(13, 130, 7, 2))
	p.Batches[0].Base, p.Batches[0].Last = 10, 10
	if !Short([]Part{p}, []int64{10}) {
		t.Fatal("a cut at the window's first batch is not short")
	}
	if !Short([]Part{p}, []int64{11}) {
		t.Fatal("a cut at a transaction that may have begun before the window is not short")
	}
	if Short([]Part{p}, []int64{13}) {
		t.Fatal("a cut at a transaction begun after its producer's marker is short")
	}
	p.FromLogStart = true
	if Short([]Part{p}, []int64{10}) {
		t.Fatal("a window from the log start is short")
	}
}

// TestPartRead collects batches chunk by chunk: from the batch holding
// the offset asked, none at or past End, and it stops when a chunk adds
// nothing (a log that ends before End).
func TestPartRead(t *testing.T) {
	log := []Batch{{Base: 0, Last: 4}, {Base: 5, Last: 9}, {Base: 10, Last: 14}, {Base: 15, Last: 19}}
	var asked []int64
	read := func(off int64) ([]Batch, error) { // two batches a chunk
		asked = append(asked, off)
		for i, b := range log {
			if b.Last >= off {
				return log[i:min(i+2, len(log))], nil
			}
		}
		return nil, nil
	}
	p := Part{End: 12}
	if err := p.Read(7, read); err != nil {
		t.Fatal(err)
	}
	if len(p.Batches) != 2 || p.Batches[0].Base != 5 || p.Batches[1].Base != 10 || !slices.Equal(asked, []int64{7}) {
		t.Fatalf("to 12 from 7: batches %+v after reads at %v", p.Batches, asked)
	}
	asked = nil
	p = Part{End: 100}
	if err := p.Read(0, read); err != nil {
		t.Fatal(err)
	}
	if len(p.Batches) != 4 || !slices.Equal(asked, []int64{0, 10, 20}) {
		t.Fatalf("to 100 from 0: %d batches after reads at %v", len(p.Batches), asked)
	}
}
