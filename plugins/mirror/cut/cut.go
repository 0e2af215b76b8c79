// Package cut is the rule of a consistent failover (issue 30): one
// source time T for a set of mirrored partitions, and per partition the
// offset the destination keeps up to, such that no transaction is whole
// on one partition and missing on another. It works on what the
// destination holds only, so that it needs no source: Held (or the
// caller, from another broker's log with Fetch and BatchOf) reads the
// batch headers, and each control batch's COMMIT or ABORT, into a Part
// per partition; Consistent computes the cut, Short says whether the
// windows read were long enough, Loss what a partition gives up.
//
// It is pure but for Held, which reads an engine partition. Deciding
// the cut for a set, persisting it and truncating to it are the
// consistent failover's stage's (plugins/mirror/cutover).
package cut

import (
	"fmt"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// FetchBytes bounds the bytes of one read of a partition's batches for
// the cut (Held, and the plugin's Fetch from a partition's leader):
// memory stays bounded whatever the window.
const FetchBytes = 1 << 20

// Batch is what the cut needs of one record batch a partition holds.
type Batch struct {
	Base, Last int64 // first and last offset of the batch
	MaxTs      int64 // the batch's MaxTimestamp
	PID        int64
	Epoch      int16
	Txn        bool  // transactional
	Control    bool  // a transaction marker
	Commit     bool  // for a marker: COMMIT rather than ABORT
	Records    int32 // records of a data batch (0 for a marker)
}

// Part is one partition's held batches, in offset order, from the
// batch holding offset Start (the scan window's start) to End (the
// offset after the last). FromLogStart says the window starts at the
// log start: nothing held lies before it.
type Part struct {
	Batches      []Batch
	End          int64
	FromLogStart bool
	// Complete is when the partition last held all the source had (Unix
	// ms, 0 unknown): it is complete up to then even if idle since.
	Complete int64
	// Stable is the partition's last stable offset when its batches
	// were read: the first offset of its oldest transaction still open,
	// or its high watermark. A window starting above it misses that
	// transaction's first batches (Short). Left zero, it reads as a
	// transaction open from offset 0: the window grows to the log start.
	Stable int64
}

// txnID names one transaction on every partition it touched: the
// producer ID and the epoch of its data. Under transaction version 2
// (KIP-890, which the broker finalizes) the epoch is bumped at every
// end, so the pair is unique; the markers carry the bumped epoch, which
// is why a transaction is named by its data, not its marker. Under
// version 1 one pair names every transaction of a producer session;
// txnsBelow tells, by the pair's data coming back after its marker.
type txnID struct {
	PID   int64
	Epoch int16
}

// Consistent returns T and the cut of each partition: the offset of
// the first record it gives up (End when it keeps all).
//
// The rule: L(p) is the largest timestamp partition p holds, or the time
// it was last known to hold all the source had, if later; T is the
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
//
// A producer session that wrote transactions under version 1 (one pair
// for all of them) cannot have one of its transactions told from
// another across partitions: if any of them is not whole, every
// partition is cut at the session's first batch, so that none of its
// transactions is kept anywhere. That loses more; it never splits one.
func Consistent(parts []Part) (int64, []int64) {
	t := int64(-1)
	for _, p := range parts {
		if len(p.Batches) == 0 && p.Complete <= 0 {
			continue
		}
		l := p.Complete
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
		committed, pending, reused := txnsBelow(parts, cuts)
		split := func(id txnID) bool {
			for i := range pending {
				if pending[i][id] {
					return true
				}
			}
			return false
		}
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
				if (!reused[id] && !committed[i][id]) || !split(id) {
					continue
				}
				// b is the first batch of id below the cut (of the
				// session, under version 1): earlier ones were seen
				// first.
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

// txnsBelow returns, per partition, the transactions with a COMMIT below
// the cut and those with data there that are not committed below it
// and not aborted (pending: their COMMIT is beyond the cut, or not held
// yet); and the pairs that name several transactions (version 1).
func txnsBelow(parts []Part, cuts []int64) (committed, pending []map[txnID]bool, reused map[txnID]bool) {
	committed = make([]map[txnID]bool, len(parts))
	pending = make([]map[txnID]bool, len(parts))
	reused = map[txnID]bool{}
	for i, p := range parts {
		committed[i], pending[i] = map[txnID]bool{}, map[txnID]bool{}
		open := map[int64]txnID{} // producer ID to its open transaction
		ended := map[txnID]bool{}
		for _, b := range p.Batches {
			switch {
			case b.Control:
				id, ok := open[b.PID]
				if !ok {
					continue
				}
				delete(open, b.PID)
				ended[id] = true
				switch {
				case b.Commit && b.Base < cuts[i]:
					committed[i][id] = true
				case b.Commit:
					pending[i][id] = true
				}
			case b.Txn:
				id := txnID{b.PID, b.Epoch}
				if _, ok := open[b.PID]; !ok {
					open[b.PID] = id
					if ended[id] {
						reused[id] = true
					}
				}
			}
		}
		for _, id := range open {
			pending[i][id] = true
		}
	}
	return committed, pending, reused
}

// Short reports whether the scan windows were too short for cuts: a
// partition not scanned from its log start whose cut falls at its
// window's first batch, or at a transactional batch of a producer with
// no marker before it in the window (the transaction, or a version-1
// session, may have begun before the window, where its first batch is);
// or a transaction still open at its end that began before its window
// (Stable below the window), whose COMMIT may be kept elsewhere; or a
// COMMIT whose transaction began before its window and that the cuts
// may split (orphanSplit).
func Short(parts []Part, cuts []int64) bool {
	for i, p := range parts {
		if p.FromLogStart || len(p.Batches) == 0 {
			continue
		}
		if p.Stable < p.Batches[0].Base {
			return true
		}
		if cuts[i] >= p.End {
			continue
		}
		if cuts[i] <= p.Batches[0].Base {
			return true
		}
		marked := map[int64]bool{}
		for _, b := range p.Batches {
			if b.Base >= cuts[i] {
				if b.Base == cuts[i] && b.Txn && !b.Control && !marked[b.PID] {
					return true
				}
				break
			}
			if b.Control {
				marked[b.PID] = true
			}
		}
	}
	return orphanSplit(parts, cuts)
}

// commitKey names a COMMIT by its producer and the epoch it carries.
type commitKey struct {
	PID   int64
	Epoch int16
}

// orphanSplit reports whether a window holds an orphan COMMIT that the
// cuts may split. An orphan's transaction began before the window, so
// Consistent does not know it (a transaction is named by its data): a
// COMMIT kept on one partition while another partition's COMMIT of
// the same producer and epoch is cut, or its data there is still open,
// or the other way round, would leave the transaction whole on one
// partition and not on the other. The marker's epoch is the data's
// under transaction version 1 and one more under version 2 (bumped at
// the end), so an open transaction matches both. Orphans whose
// transaction the cuts keep or give up everywhere are harmless, which
// is what lets the windows stop growing under steady transactional
// traffic, where a window's start is nearly always inside some
// transaction.
func orphanSplit(parts []Part, cuts []int64) bool {
	type orphan struct {
		part int
		key  commitKey
		kept bool
	}
	var orphans []orphan
	kept := make([]map[commitKey]bool, len(parts))    // COMMITs below the cut
	pending := make([]map[commitKey]bool, len(parts)) // COMMITs at or past it, and open transactions
	for i, p := range parts {
		kept[i], pending[i] = map[commitKey]bool{}, map[commitKey]bool{}
		open := map[int64]int16{} // producer ID to its open transaction's epoch
		for _, b := range p.Batches {
			switch {
			case b.Control:
				_, known := open[b.PID]
				delete(open, b.PID)
				if !b.Commit {
					continue
				}
				k, below := commitKey{b.PID, b.Epoch}, b.Base < cuts[i]
				if below {
					kept[i][k] = true
				} else {
					pending[i][k] = true
				}
				if !known && !p.FromLogStart {
					orphans = append(orphans, orphan{i, k, below})
				}
			case b.Txn:
				if _, ok := open[b.PID]; !ok {
					open[b.PID] = b.Epoch
				}
			}
		}
		for pid, epoch := range open {
			pending[i][commitKey{pid, epoch}] = true
			pending[i][commitKey{pid, epoch + 1}] = true
		}
	}
	for _, o := range orphans {
		other := kept
		if o.kept {
			other = pending
		}
		for j := range parts {
			if j != o.part && other[j][o.key] {
				return true
			}
		}
	}
	return false
}

// Loss is what a partition gives up beyond its cut: the records (of
// data batches; markers are not records) and how much source time they
// span past T.
func Loss(p Part, cut, t int64) (records, ms int64) {
	last := t
	for _, b := range p.Batches {
		if b.Last < cut {
			continue
		}
		last = max(last, b.MaxTs)
		if !b.Control {
			records += int64(b.Records)
		}
	}
	if cut >= p.End {
		return 0, 0
	}
	return records, last - t
}

// BatchOf reads what the cut needs of one batch's header.
func BatchOf(b []byte) (Batch, error) {
	h, err := engine.ParseBatchHeader(b)
	if err != nil {
		return Batch{}, err
	}
	cb := Batch{Base: h.BaseOffset, Last: h.LastOffset(), MaxTs: h.MaxTimestamp,
		PID: h.ProducerID, Epoch: h.ProducerEpoch, Txn: h.Transactional(), Control: h.Control()}
	if cb.Control {
		cb.Commit = engine.ControlType(b) == engine.ControlCommit
	} else {
		cb.Records = h.NumRecords
	}
	return cb, nil
}

// Held reads what the cut needs of partition ep's batches from
// the one holding offset start to end.
func Held(ep plugin.Log, start, end int64) (Part, error) {
	offs := ep.Offsets()
	start = max(start, offs.LogStart)
	p := Part{End: end, FromLogStart: start <= offs.LogStart, Stable: offs.LastStable}
	err := p.Read(start, func(off int64) ([]Batch, error) {
		res, err := ep.Fetch(off, FetchBytes, engine.ReadUncommitted)
		if err != nil {
			return nil, fmt.Errorf("reading %s-%d at %d for the cut: %w", ep.Topic(), ep.Index(), off, err)
		}
		bs := make([]Batch, 0, len(res.Batches))
		for _, b := range res.Batches {
			cb, err := BatchOf(b)
			if err != nil {
				return nil, fmt.Errorf("reading %s-%d at %d for the cut: %w", ep.Topic(), ep.Index(), off, err)
			}
			bs = append(bs, cb)
		}
		return bs, nil
	})
	if err != nil {
		return Part{}, err
	}
	return p, nil
}

// Read adds to p's batches those from the one holding offset from to
// p.End, reading them a chunk at a time with read (from a local log, or
// from the partition's leader with Fetch): read returns the batches from
// the one holding the offset it is given on, as many as it likes. It
// stops at p.End, or when a chunk adds nothing.
func (p *Part) Read(from int64, read func(off int64) ([]Batch, error)) error {
	for off := from; off < p.End; {
		bs, err := read(off)
		if err != nil {
			return err
		}
		n := len(p.Batches)
		for _, b := range bs {
			if b.Last >= off && b.Base < p.End {
				p.Batches = append(p.Batches, b)
			}
		}
		if len(p.Batches) == n {
			return nil
		}
		off = p.Batches[len(p.Batches)-1].Last + 1
	}
	return nil
}
