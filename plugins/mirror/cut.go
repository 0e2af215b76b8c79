package mirror

import (
	"fmt"

	"github.com/tandem-kafka/tandem/engine"
)

// This file computes a consistent cut (issue 30): one source time T for a
// set of mirrored partitions, and per partition the offset the
// destination keeps up to, such that no transaction is whole on one
// partition and missing on another. It works on what the destination
// holds only, so that it needs no source; the caller reads the batch
// headers (and each control batch's COMMIT or ABORT) and applies the cut.

// cutBatch is what the cut needs of one record batch a partition holds.
type cutBatch struct {
	Base, Last int64 // first and last offset of the batch
	MaxTs      int64 // the batch's MaxTimestamp
	PID        int64
	Epoch      int16
	Txn        bool // transactional
	Control    bool // a transaction marker
	Commit     bool // for a marker: COMMIT rather than ABORT
}

// cutPart is one partition's held batches, in offset order, and its end
// (the offset after the last).
type cutPart struct {
	Batches []cutBatch
	End     int64
}

// txnID names one transaction on every partition it touched: the
// producer ID and the epoch of its data. Under transaction version 2
// (KIP-890, which the broker finalizes) the epoch is bumped at every
// end, so the pair is unique; the markers carry the bumped epoch, which
// is why a transaction is named by its data, not its marker.
type txnID struct {
	PID   int64
	Epoch int16
}

// consistentCut returns T and the cut of each partition: the offset of
// the first record it gives up (End when it keeps all).
//
// The rule: L(p) is the largest timestamp partition p holds; T is the
// least L(p) over the partitions that hold anything, the latest source
// time every partition is known complete up to, given timestamps in
// order within a partition (LogAppendTime, or CreateTime from producers
// whose clocks agree). Each partition keeps the batches before its first
// batch with a timestamp past T. Then cuts only move down: a transaction
// committed below the cut on one partition and not on another it touched
// (its data or its COMMIT beyond the cut there) loses its COMMIT
// everywhere: each partition's cut goes down to the transaction's first
// batch on it. That is repeated until nothing moves, since a lower cut
// may split another transaction. Transactions left open at the cut are
// aborted by the stop, as today. The cut never goes below a partition's
// first held batch, so the loop ends.
func consistentCut(parts []cutPart) (int64, []int64) {
	t := int64(-1)
	for _, p := range parts {
		if len(p.Batches) == 0 {
			continue
		}
		l := p.Batches[0].MaxTs
		for _, b := range p.Batches {
			l = max(l, b.MaxTs)
		}
		if t < 0 || l < t {
			t = l
		}
	}
	cuts := make([]int64, len(parts))
	for i, p := range parts {
		cuts[i] = p.End
		for _, b := range p.Batches {
			if b.MaxTs > t {
				cuts[i] = b.Base
				break
			}
		}
	}
	for {
		committed, touched := txnsBelow(parts, cuts)
		moved := false
		for i, p := range parts {
			for _, b := range p.Batches {
				if b.Base >= cuts[i] {
					break
				}
				if b.Control || !b.Txn {
					continue
				}
				id := txnID{b.PID, b.Epoch}
				if !committed[i][id] || whole(id, committed, touched) {
					continue
				}
				// b is the first batch of id below the cut: earlier
				// batches of id were seen first.
				cuts[i] = b.Base
				moved = true
				break
			}
		}
		if !moved {
			return t, cuts
		}
	}
}

// whole reports whether id is committed below the cut on every
// partition it touched.
func whole(id txnID, committed []map[txnID]bool, touched []map[txnID]bool) bool {
	for i := range touched {
		if touched[i][id] && !committed[i][id] {
			return false
		}
	}
	return true
}

// txnsBelow returns, per partition, the transactions whose COMMIT is
// below the cut, and every transaction the partition holds data of
// (below the cut or not).
func txnsBelow(parts []cutPart, cuts []int64) (committed, touched []map[txnID]bool) {
	committed = make([]map[txnID]bool, len(parts))
	touched = make([]map[txnID]bool, len(parts))
	for i, p := range parts {
		committed[i], touched[i] = map[txnID]bool{}, map[txnID]bool{}
		open := map[int64]txnID{} // producer ID to its open transaction
		for _, b := range p.Batches {
			switch {
			case b.Control:
				id, ok := open[b.PID]
				if !ok {
					continue
				}
				delete(open, b.PID)
				if b.Commit && b.Base < cuts[i] {
					committed[i][id] = true
				}
			case b.Txn:
				id := txnID{b.PID, b.Epoch}
				touched[i][id] = true
				if _, ok := open[b.PID]; !ok {
					open[b.PID] = id
				}
			}
		}
	}
	return committed, touched
}

// cutLoss is what a partition gives up beyond its cut: the records and
// how much source time they span past T.
func cutLoss(p cutPart, cut, t int64) (records, ms int64) {
	last := t
	for _, b := range p.Batches {
		if b.Last < cut {
			continue
		}
		last = max(last, b.MaxTs)
	}
	records = max(p.End-cut, 0)
	if records == 0 {
		return 0, 0
	}
	return records, last - t
}

// heldBatches reads what the cut needs of partition ep's batches from
// offset start to its end.
func heldBatches(ep *engine.Partition, start int64) (cutPart, error) {
	p := cutPart{End: ep.Offsets().LogEnd}
	err := eachBatch(ep, start, func(bs [][]byte) error {
		for _, b := range bs {
			h, _ := engine.ParseBatchHeader(b)
			p.Batches = append(p.Batches, cutBatch{
				Base: h.BaseOffset, Last: h.LastOffset(), MaxTs: h.MaxTimestamp,
				PID: h.ProducerID, Epoch: h.ProducerEpoch,
				Txn: h.Transactional(), Control: h.Control(),
				Commit: h.Control() && engine.ControlType(b) == engine.ControlCommit,
			})
		}
		return nil
	})
	if err != nil {
		return cutPart{}, fmt.Errorf("reading %s-%d for the cut: %w", ep.Topic(), ep.Index(), err)
	}
	return p, nil
}
