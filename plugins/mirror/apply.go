package mirror

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// What a fetcher's answer does to a partition: the truncation on a
// diverging epoch or a log start past our end, the append, the end
// offsets learned and the lag measured (fetchTarget.Apply and Refresh
// call in here, fetchtarget.go).

// applyPartition applies one partition of a fetch response sent from
// offset from: truncation on a diverging epoch or a log start past our
// end, then the batches, appended unchanged. It works only on a partition
// still MIRRORING whose log ends where the fetch started, with applyMu
// held. The append is written before it returns; wait (nil when nothing
// was appended) waits until it is durable and finishes the partition's
// bookkeeping, without applyMu and without the answer's bytes (the
// fetcher reads its next answer into them meanwhile). The fetcher has
// trimmed the batches to whole ones not above the epoch it fetched for.
func (r *mirrorRun) applyPartition(pt *ledPartition, from int64, rp *kmsg.FetchResponseTopicPartition) (n int, wait func() error, err error) {
	switch rp.ErrorCode {
	case 0:
	case kerr.OffsetOutOfRange.Code:
		return 0, nil, r.outOfRange(pt)
	default:
		err := fmt.Errorf("source partition: %w", kerr.ErrorForCode(rp.ErrorCode))
		r.setTrouble([]*ledPartition{pt}, err)
		r.markStale() // leadership or the topic changed on the source
		return 0, nil, err
	}
	ep, written, err := r.appendFetched(pt, from, rp)
	if ref := (writeRefused{}); errors.As(err, &ref) {
		return 0, nil, r.refused(pt, rp.RecordBatches, ref.error)
	}
	if err != nil || written == nil {
		return 0, nil, err
	}
	return len(rp.RecordBatches), func() error {
		if _, err := written(); err != nil {
			if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
				return nil // taken away meanwhile
			}
			return r.fail(pt, fmt.Errorf("append mirrored batches: %w", err))
		}
		r.mu.Lock()
		logStartTo := pt.logStartTo
		pt.logStartTo = -1
		r.mu.Unlock()
		if logStartTo >= 0 {
			// The log changes only with applyMu held, and while
			// the partition is still MIRRORING.
			r.applyMu.Lock()
			if st, _ := r.state(pt.topicPartition); st == mirrorstate.Mirroring {
				if _, err := ep.DeleteRecords(logStartTo); err != nil {
					r.log.Warn("mirror: move log start", "topic", pt.Topic, "partition", pt.Partition, "err", err)
				}
			}
			r.applyMu.Unlock()
		}
		r.caughtUp(pt, ep)
		return nil
	}, nil
}

// appendFetched does applyPartition's work on the log, with applyMu held:
// a diverging epoch's truncation, or the append. written is nil when
// nothing was written (nothing to append, the partition left MIRRORING,
// a truncation); an append refused before anything was written is a
// writeRefused error.
func (r *mirrorRun) appendFetched(pt *ledPartition, from int64, rp *kmsg.FetchResponseTopicPartition) (ep plugin.Log, written func() (engine.AppendResult, error), err error) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
		return nil, nil, nil // taken from the fetcher meanwhile
	}
	if ep, err = r.partition(pt); err != nil {
		return nil, nil, err
	}
	r.learnedEnd(pt, rp.HighWatermark)
	if d := rp.DivergingEpoch; d.Epoch >= 0 || d.EndOffset >= 0 {
		// Epoch-based truncation: our last epoch ends earlier on the
		// source (an unclean election there, or a failback).
		_, end := ep.EndOffsetForEpoch(d.Epoch)
		to := min(d.EndOffset, end)
		if end < 0 {
			to = d.EndOffset
		}
		r.log.Info("mirror epoch truncation", "topic", pt.Topic, "partition", pt.Partition, "epoch", d.Epoch, "offset", to)
		if err := r.truncate(pt, ep, to, fmt.Sprintf("diverging epoch %d", d.Epoch)); err != nil {
			return nil, nil, r.fail(pt, fmt.Errorf("epoch truncation to %d: %w", to, err))
		}
		return ep, nil, nil
	}
	if len(rp.RecordBatches) == 0 {
		r.caughtUp(pt, ep)
		return ep, nil, nil
	}
	// The fetcher sends its next Fetch before its appends are durable:
	// if one of them failed meanwhile, the log no longer ends where this
	// answer starts, and appending it would leave a hole.
	r.mu.Lock()
	end := max(ep.Offsets().LogEnd, pt.logStartTo)
	r.mu.Unlock()
	if end != from {
		return ep, nil, fmt.Errorf("fetched from offset %d, the log ends at %d: %w", from, end, engine.ErrUnexpectedAppendOffset)
	}
	written, err = ep.Write(r.ctx, &engine.AppendRequest{Topic: pt.Topic, TopicID: pt.id, Partition: pt.Partition,
		Origin: engine.OriginCrossCluster, Records: rp.RecordBatches, Acks: -1})
	if err != nil {
		return ep, nil, writeRefused{err}
	}
	return ep, written, nil
}

// writeRefused is an append the engine refused before writing anything.
type writeRefused struct{ error }

func (w writeRefused) Unwrap() error { return w.error }

// refused is what an append refused before anything was written means
// for the partition.
func (r *mirrorRun) refused(pt *ledPartition, batches []byte, err error) error {
	switch {
	case errors.Is(err, mirrorproto.ErrMirrorLeaderEpochExceeded):
		r.scheduleBump(pt.Topic, pt.Partition, maxBatchEpoch(batches))
		return r.setState(pt, mirrorstate.EpochFencing, "")
	case errors.Is(err, engine.ErrUnexpectedAppendOffset):
		return err // our log moved meanwhile: fetch again from its end
	}
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
		return nil // the validator saw it taken away first
	}
	return r.fail(pt, fmt.Errorf("append mirrored batches: %w", err))
}

// caughtUp records the partition's log end after an apply, and whether it
// holds all of the source's end offset last learned.
func (r *mirrorRun) caughtUp(pt *ledPartition, ep plugin.Log) {
	leo := ep.Offsets().LogEnd
	r.mu.Lock()
	defer r.mu.Unlock()
	pt.dstLEO = leo
	if leo >= pt.srcEnd {
		pt.lagMs, pt.caughtUpAt = 0, pt.srcEndAt
	}
}

// learnedEnd records the source's end offset of a partition, just learned.
func (r *mirrorRun) learnedEnd(pt *ledPartition, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pt.srcEnd, pt.srcEndAt, pt.trouble = end, time.Now(), ""
	if pt.dstLEO >= end {
		pt.lagMs, pt.caughtUpAt = 0, pt.srcEndAt
	} else if pt.lagMs == 0 {
		pt.lagMs = -1 // behind again: unknown until measured
	}
}

// outOfRange handles OFFSET_OUT_OF_RANGE: below the source's log start
// (retention moved it), the log is emptied and restarts at the source's
// start; above the source's end (an unclean election lost records), the
// log is cut to the source's end. The source is asked first, without
// applyMu: a failover never waits for the source.
func (r *mirrorRun) outOfRange(pt *ledPartition) error {
	r.mu.Lock()
	leader := pt.leader
	r.mu.Unlock()
	var start, end int64
	for _, ts := range []int64{-2, -1} {
		offs, err := r.listOffsets(leader, ts, []*ledPartition{pt})
		if err != nil {
			return err
		}
		lp, ok := offs[pt.topicPartition]
		if !ok {
			return fmt.Errorf("list offsets: malformed response")
		}
		if lp.ErrorCode != 0 {
			return fmt.Errorf("list offsets: %w", kerr.ErrorForCode(lp.ErrorCode))
		}
		if ts == -2 {
			start = lp.Offset
		} else {
			end = lp.Offset
		}
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
		return nil
	}
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	defer r.changed() // the fetcher's position moved
	switch leo := ep.Offsets().LogEnd; {
	case leo < start:
		r.log.Info("mirror: source log start is past our end; restarting there", "topic", pt.Topic, "partition", pt.Partition, "start", start)
		if err := ep.Truncate(0); err != nil {
			return err
		}
		r.mu.Lock()
		pt.logStartTo = start
		r.mu.Unlock()
	case leo > end:
		if err := r.truncate(pt, ep, end, "the source's log ends earlier"); err != nil {
			return r.fail(pt, fmt.Errorf("truncation to the source's end %d: %w", end, err))
		}
	}
	return nil
}

// listOffsets asks a source broker for one timestamp's offsets of parts,
// by their names here.
func (r *mirrorRun) listOffsets(broker int32, ts int64, parts []*ledPartition) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	out, err := r.listOffsetsAt(broker, parts, func(*ledPartition) int64 { return ts })
	if err != nil {
		return nil, r.sourceErr(fmt.Sprintf("ListOffsets to broker %d", broker), err)
	}
	r.contacted()
	return out, nil
}

// listOffsetsAt asks a source broker for the offsets of parts at the
// timestamp at gives each, by their names here.
func (r *mirrorRun) listOffsetsAt(broker int32, parts []*ledPartition, at func(*ledPartition) int64) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	here := map[string]string{} // source names (mirror.topic.prefix) to ours
	for _, pt := range parts {
		i, ok := idx[pt.src]
		if !ok {
			i = len(req.Topics)
			idx[pt.src], here[pt.src] = i, pt.Topic
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = pt.src
			req.Topics = append(req.Topics, rt)
		}
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = pt.Partition, at(pt), -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, lp)
	}
	resp, err := r.request(broker, req)
	if err != nil {
		return nil, err
	}
	out := map[topicPartition]kmsg.ListOffsetsResponseTopicPartition{}
	for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
		name, ok := here[rt.Topic]
		if !ok {
			continue
		}
		for _, rp := range rt.Partitions {
			out[topicPartition{Topic: name, Partition: rp.Partition}] = rp
		}
	}
	return out, nil
}

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
		case pt.srcEnd > pt.dstLEO:
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
					pt.dstLEO = ep.Offsets().LogEnd
					r.mu.Unlock()
				}
				r.learnedEnd(pt, lp.Offset)
			}
		}
		behind = append(behind, paused...)
	}
	r.measureLagMs(broker, behind)
}

// measureLagMs sets the lag in milliseconds of the partitions that are
// behind their source: the span of record time a failover now would give
// up (lagspan.go), from the oldest record the destination lacks to the
// source's newest (ListOffsets MAX_TIMESTAMP, KIP-734). Record time, not
// wall-clock time: a quiet source with a stalled mirror does not look
// worse by the minute, a busy one that is seconds behind shows those
// seconds, and a burst after a quiet gap shows the burst, not the gap. A
// destination log still empty keeps the previous value.
func (r *mirrorRun) measureLagMs(broker int32, parts []*ledPartition) {
	r.mu.Lock()
	parts = slices.DeleteFunc(slices.Clone(parts), func(pt *ledPartition) bool { return pt.srcEnd <= pt.dstLEO })
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
