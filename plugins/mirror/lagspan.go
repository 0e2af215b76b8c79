package mirror

import (
	"maps"
	"slices"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/source"
)

// The lag in record time that every view shows (--describe's LAG-MS,
// --json's lag_ms, the console, tandem_mirror_lag_seconds, a forced
// failover's report) is the span of record time the records a failover
// now would give up cover: from the oldest of them to the source's
// newest record. The oldest record the destination lacks is the
// source's first record newer than the destination's newest (with
// timestamps in offset order, the record at the destination's end;
// testing/checker.Lost measures the same from what the source
// acknowledged, and the RPO campaign holds the two equal). Measured
// from the destination's newest record alone, a burst after a quiet gap
// read as the gap (1,000 records produced within a second after 110 s of
// quiet: "at least 110677 ms of data"), and a lone failover barrier
// after a failback as the minute before it.

// refreshEnds keeps the source end offsets of the fetcher's paused
// partitions fresh (they are not fetched) and measures the lag in
// milliseconds of those behind; the fetcher of broker calls it at most
// once a second, with the partitions of its round.
func (r *mirrorRun) refreshEnds(broker int32, parts []*ledPartition) {
	var paused, behind []*ledPartition
	r.mu.Lock()
	for _, pt := range parts {
		switch {
		case pt.state == mirrorstate.Paused || pt.state == mirrorstate.Pausing:
			paused = append(paused, pt)
		case pt.progress.SrcEnd > pt.progress.DstLEO:
			behind = append(behind, pt)
		}
	}
	r.mu.Unlock()
	if len(paused) > 0 {
		offs, err := r.listOffsets(broker, -1, paused)
		if err != nil {
			r.setTrouble(paused, err)
		}
		for _, pt := range paused {
			if lp, ok := offs[pt.topicPartition]; ok && lp.ErrorCode == 0 {
				if ep, err := r.partition(pt); err == nil {
					r.mu.Lock()
					pt.progress.DstLEO = ep.Offsets().LogEnd
					r.mu.Unlock()
				}
				r.applier().LearnedEnd(pt, lp.Offset)
			}
		}
		behind = append(behind, paused...)
	}
	r.measureLagMs(broker, behind)
}

// measureLagMs sets the lag in milliseconds of the partitions that are
// behind their source: the span of record time a failover now would give
// up (setLagSpans), from the oldest record the destination lacks to the
// source's newest (ListOffsets MAX_TIMESTAMP, KIP-734). Record time, not
// wall-clock time: a quiet source with a stalled mirror does not look
// worse by the minute, a busy one that is seconds behind shows those
// seconds, and a burst after a quiet gap shows the burst, not the gap. A
// destination log still empty keeps the previous value.
func (r *mirrorRun) measureLagMs(broker int32, parts []*ledPartition) {
	r.mu.Lock()
	parts = slices.DeleteFunc(slices.Clone(parts), func(pt *ledPartition) bool { return pt.progress.SrcEnd <= pt.progress.DstLEO })
	r.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	offs, err := r.listOffsets(broker, -3, parts)
	if err != nil {
		return // the fetches report the source's health
	}
	newest := map[*ledPartition]int64{}
	for _, pt := range parts {
		if lp, ok := offs[pt.topicPartition]; ok && lp.ErrorCode == 0 && lp.Offset >= 0 {
			newest[pt] = lp.Timestamp
		}
	}
	r.setLagSpans(broker, newest)
}

// setLagSpans sets the lag in milliseconds of partitions behind their
// source whose newest source record time is newest[pt].
func (r *mirrorRun) setLagSpans(broker int32, newest map[*ledPartition]int64) {
	dstNewest := map[*ledPartition]int64{}
	for pt := range newest {
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		_, dstTs, _, ok := ep.MaxTimestamp()
		if !ok {
			continue // an empty log keeps the previous value
		}
		dstNewest[pt] = dstTs
	}
	oldest := r.firstNewer(broker, dstNewest)
	r.mu.Lock()
	defer r.mu.Unlock()
	for pt, from := range dstNewest {
		if pt.progress.SrcEnd <= pt.progress.DstLEO {
			continue // caught up meanwhile
		}
		if ts, ok := oldest[pt]; ok {
			from = max(from, ts)
		}
		pt.progress.LagMs = max(1, newest[pt]-from)
	}
}

// firstNewer asks the source, per partition, for the time of its first
// record newer than after[pt] (ListOffsets by timestamp): the oldest
// record the destination lacks. A partition without one, or a source
// that does not answer, is left out (the span is then measured from
// after[pt], an upper bound).
func (r *mirrorRun) firstNewer(broker int32, after map[*ledPartition]int64) map[*ledPartition]int64 {
	out := map[*ledPartition]int64{}
	if len(after) == 0 {
		return out
	}
	parts := slices.Collect(maps.Keys(after))
	offs, err := source.ListOffsetsAt(r.ctx, r.src.conn, broker, parts, func(pt *ledPartition) int64 { return after[pt] + 1 })
	if err != nil {
		return out // the fetches report the source's health
	}
	for _, pt := range parts {
		if rp, ok := offs[pt.topicPartition]; ok && rp.ErrorCode == 0 && rp.Offset >= 0 {
			out[pt] = rp.Timestamp
		}
	}
	return out
}
