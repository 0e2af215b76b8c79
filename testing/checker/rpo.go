package checker

import (
	"fmt"
	"slices"
	"sort"
	"sync"
)

// What a mirror's forced failover gives up, measured from what the source
// acknowledged, to hold it against what the failover reported.
//
// The destination learns the source's end offset (its high watermark)
// from fetch responses, at a time it records. Of the acknowledged records
// it does not have, it can know only those below the last end it
// learned: for [destination end, learned end) the report is exact, and
// beyond the learned end it can say nothing ("at least"). Lost measures
// both parts from the acknowledged offsets, so that each is an exact
// equality: reported records = Known, reported milliseconds = KnownMs,
// and what was really given up = Known + Beyond.

// Acked is one acknowledged record of a partition: its offset, value and
// timestamp (Unix milliseconds, as the producer set it).
type Acked struct {
	Offset    int64
	Value     string
	Timestamp int64
}

// Acks are the acknowledged records of a topic, by partition. The zero
// value is ready to use; it is safe for concurrent use.
type Acks struct {
	mu sync.Mutex
	by map[int32][]Acked
}

// Add records an acknowledged record of partition p.
func (a *Acks) Add(p int32, r Acked) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = map[int32][]Acked{}
	}
	a.by[p] = append(a.by[p], r)
}

// Partition returns the acknowledged records of p in offset order.
func (a *Acks) Partition(p int32) []Acked {
	a.mu.Lock()
	out := slices.Clone(a.by[p])
	a.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

// Len is the number of acknowledged records.
func (a *Acks) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, rs := range a.by {
		n += len(rs)
	}
	return n
}

// Loss is what a failover gave up on one partition, measured.
type Loss struct {
	// Known is the number of acknowledged records in [destination end,
	// learned source end): those the destination knew it did not have.
	Known int64
	// KnownMs is their span in record time, as the broker's lag_ms is
	// defined: the newest timestamp among the acknowledged records below
	// the learned source end minus the timestamp of the first of them
	// newer than everything below the destination end (the oldest record
	// given up, as ListOffsets by timestamp finds it), at least 1; 0 when
	// Known is 0, -1 when nothing was mirrored (no time on the
	// destination to measure from).
	KnownMs int64
	// Beyond is the number of acknowledged records at or above the
	// learned source end: unknowable to the destination.
	Beyond int64
	// Missing is every acknowledged record at or above the destination
	// end: Known + Beyond.
	Missing int64
}

// Lost measures a partition's loss from its acknowledged records (in
// offset order, as Acks.Partition returns them), the end of the mirrored
// data (dstEnd) and the source end the destination had learned (srcEnd,
// -1 if it never learned one: then everything missing is beyond it).
func Lost(acked []Acked, dstEnd, srcEnd int64) Loss {
	var l Loss
	newestBelow := func(end int64) (ts int64, ok bool) {
		for _, r := range acked {
			if r.Offset < end && (!ok || r.Timestamp > ts) {
				ts, ok = r.Timestamp, true
			}
		}
		return ts, ok
	}
	for _, r := range acked {
		switch {
		case r.Offset < dstEnd:
		case r.Offset < srcEnd:
			l.Known++
		default:
			l.Beyond++
		}
	}
	l.Missing = l.Known + l.Beyond
	if l.Known > 0 {
		src, _ := newestBelow(srcEnd)
		if dst, ok := newestBelow(dstEnd); ok {
			from := dst
			for _, r := range acked {
				if r.Offset >= dstEnd && r.Timestamp > dst {
					from = r.Timestamp // the oldest record given up
					break
				}
			}
			l.KnownMs = max(1, src-from) // behind by a record or more: at least 1 ms, as the broker says
		} else {
			l.KnownMs = -1
		}
	}
	return l
}

func (l Loss) String() string {
	return fmt.Sprintf("%d records (%d ms) below the learned source end, %d beyond it", l.Known, l.KnownMs, l.Beyond)
}
