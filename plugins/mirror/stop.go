package mirror

import (
	"fmt"
	"slices"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/cutover"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// StopStep names a step of the failover sequence (STOPPING), in the
// KIP's order. A step is durable once its hook runs: a broker killed
// after it resumes with the next step.
type StopStep string

const (
	StepFetcherRemoved StopStep = "fetcher-removed"      // StopAt and StopEpoch persisted
	StepCutDeciding    StopStep = cutover.StepDeciding   // a consistent cut written for all but the decider's partition
	StepCutApplied     StopStep = cutover.StepApplied    // the partition truncated to its consistent cut
	StepEpochBumped    StopStep = "epoch-bumped"         // destination epoch above every mirrored batch
	StepTxnsAborted    StopStep = "transactions-aborted" // ABORT markers for the source's open transactions
	StepLMEPersisted   StopStep = "lme-persisted"        // last mirror epoch and offset persisted
	StepBarrierWritten StopStep = "barrier-written"      // the one MIRROR_PID_RESET barrier
	StepWritable       StopStep = "writable"             // the topic left the mirror (partition -1)
)

// stopPartition is STOPPING (failover), an idempotent sequence that needs
// nothing from the source: remove the fetcher, bump the epoch, abort the
// transactions the source left open, persist the last mirror epoch, write
// one barrier. Each step is skipped or repeated harmlessly when a crashed
// broker resumes it: the first step persists where the mirrored data ends
// (StopAt) and the epoch then, and the others derive from them.
func (r *mirrorRun) stopPartition(pt *ledPartition) error {
	r.mu.Lock()
	done := pt.stopDone
	r.mu.Unlock()
	if done {
		return nil
	}
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	k := mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.Topic, Partition: pt.Partition}
	st, err := r.p.store.Read(r.ctx, k, pt.id)
	if err != nil {
		return err
	}
	// 1. Remove the fetcher. After release nothing else appends, so the
	// log ends with mirrored data: StopAt is where it ends.
	r.release()
	if st.StopAt < 0 {
		offs := ep.Offsets()
		r.mu.Lock()
		complete := pt.completeAt().UnixMilli()
		r.mu.Unlock()
		if st, err = r.p.store.Write(r.ctx, k, pt.id, func(s *mirrorstate.PartitionState) error {
			s.StopAt, s.StopEpoch, s.CompleteAt = offs.LogEnd, offs.LeaderEpoch, max(s.CompleteAt, complete)
			return nil
		}); err != nil {
			return err
		}
		r.p.stopHook(pt.Topic, pt.Partition, StepFetcherRemoved)
	}
	// 1b. A consistent failover waits for its set's cut and truncates
	// to it (plugins/mirror/cutover); the rest goes on from the cut.
	var ok bool
	if st, ok, err = r.applyCut(pt, ep, st); err != nil || !ok {
		return err
	}
	lme := int32(-1)
	if st.StopAt > ep.Offsets().LogStart {
		lme = ep.EpochAt(st.StopAt - 1)
	}

	// 2. Bump the epoch above every mirrored batch and above the epoch at
	// the stop: new records carry an epoch the source never had. The
	// controller makes it max(min+1, current), so a resumed stop does
	// not bump again.
	if err := r.bumpEpoch(pt, max(st.StopEpoch, lme)); err != nil {
		return err
	}
	r.p.stopHook(pt.Topic, pt.Partition, StepEpochBumped)

	// 3. Abort what the source's coordinators left open: they will never
	// end those transactions here. Only open ones, so a resumed stop
	// writes no second marker.
	if _, err := ep.AbortOpenTransactions(r.ctx); err != nil {
		return r.fail(pt, err)
	}
	r.p.stopHook(pt.Topic, pt.Partition, StepTxnsAborted)

	// 4. Persist the last mirror epoch, twice: for the mirror, and for the
	// topic alone (mirror name ""), which outlives the mirror's deletion
	// so that a later failback still finds it.
	for _, key := range []mirrorstate.PartitionKey{k, {Mirror: "", Topic: pt.Topic, Partition: pt.Partition}} {
		if _, err := r.p.store.Write(r.ctx, key, pt.id, func(s *mirrorstate.PartitionState) error {
			s.LME, s.LMO = lme, st.StopAt-1
			if key.Mirror == "" {
				s.State = mirrorstate.Stopped
			}
			return nil
		}); err != nil {
			return err
		}
	}
	r.p.stopHook(pt.Topic, pt.Partition, StepLMEPersisted)

	// 5. One producer-state barrier: unless a resumed stop wrote it.
	has, err := hasBarrier(ep, st.StopAt)
	if err != nil {
		return err
	}
	if !has {
		if _, err := ep.WriteProducerBarrier(r.ctx); err != nil {
			return r.fail(pt, err)
		}
	}
	r.p.stopHook(pt.Topic, pt.Partition, StepBarrierWritten)
	// Persisted, so that whichever broker finishes the topic (the leader
	// of its partition 0) knows this partition is done.
	if _, err := r.p.store.Write(r.ctx, k, pt.id, func(s *mirrorstate.PartitionState) error {
		s.StopDone = true
		return nil
	}); err != nil {
		return err
	}
	r.mu.Lock()
	pt.stopDone = true
	r.mu.Unlock()
	return nil
}

// hasBarrier reports whether the log holds a producer-state barrier at or
// after offset. Above StopAt only the stop sequence writes (its ABORT
// markers, then the barrier), so the scan is short.
func hasBarrier(ep plugin.Log, from int64) (bool, error) {
	for off := from; off < ep.Offsets().LogEnd; {
		res, err := ep.Fetch(off, 1<<20, engine.ReadUncommitted)
		if err != nil {
			return false, fmt.Errorf("looking for the barrier: %w", err)
		}
		if len(res.Batches) == 0 {
			return false, nil
		}
		for _, b := range res.Batches {
			h, err := engine.ParseBatchHeader(b)
			if err != nil {
				return false, fmt.Errorf("looking for the barrier: %w", err)
			}
			if engine.IsProducerBarrier(b) {
				return true, nil
			}
			off = h.LastOffset() + 1
		}
	}
	return false, nil
}

// finishStops makes topics whose partitions all finished STOPPING
// writable (the mirror membership is marked stopped in the metadata
// quorum), then records STOPPED. The partitions' leaders may be several
// brokers: the one leading partition 0 finishes the topic, from the
// persisted states of the others (StopDone), so that exactly one broker
// changes the metadata, and another takes over if it dies.
func (r *mirrorRun) finishStops(parts []*ledPartition) error {
	byTopic := map[string][]*ledPartition{}
	r.mu.Lock()
	for _, pt := range parts {
		if pt.state == mirrorstate.Stopping {
			byTopic[pt.Topic] = append(byTopic[pt.Topic], pt)
		}
	}
	r.mu.Unlock()
	img := r.p.Image()
	for topic, pts := range byTopic {
		t := img.Topics[topic]
		if t == nil || len(t.Partitions) == 0 || t.Partitions[0].Leader != r.p.Host().NodeID() {
			continue
		}
		done, err := r.topicStopDone(t, pts)
		if err != nil || !done {
			return err
		}
		if err := r.cutover().ClampGroups(r.ctx, t); err != nil {
			return err
		}
		// The membership's stop clears mirror.name in the same batch.
		if err := r.p.Host().Metadata().StopMirrorTopic(r.ctx, r.name, topic); err != nil {
			return err
		}
		// The image here has the stop (StopMirrorTopic waits for it):
		// its index tells other brokers whether theirs does.
		stopIndex := int64(r.p.Image().Index)
		r.p.stopHook(topic, -1, StepWritable)
		// Partition 0 last: until it is STOPPED its leader finishes the
		// topic, so a finisher that dies half way is followed by the
		// partition's next leader.
		for i := len(t.Partitions) - 1; i >= 0; i-- {
			k := topicPartition{Topic: topic, Partition: int32(i)}
			st, err := r.p.store.Write(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: topic, Partition: int32(i)}, t.ID, func(s *mirrorstate.PartitionState) error {
				s.State, s.Reason, s.StopIndex = mirrorstate.Stopped, "", stopIndex
				return nil
			})
			if err != nil {
				return err
			}
			if j := slices.IndexFunc(pts, func(pt *ledPartition) bool { return pt.topicPartition == k }); j >= 0 {
				r.mu.Lock()
				pts[j].state, pts[j].reason = st.State, st.Reason
				r.mu.Unlock()
			}
		}
		r.log.Info("mirror topic stopped: now writable", "topic", topic)
	}
	return nil
}

// topicStopDone reports whether every partition of t finished its
// STOPPING work: those led here as this run knows them (local), the
// others as their coordinator persisted it.
func (r *mirrorRun) topicStopDone(t *metadata.Topic, local []*ledPartition) (bool, error) {
	for i := range t.Partitions {
		k := topicPartition{Topic: t.Name, Partition: int32(i)}
		r.mu.Lock()
		j := slices.IndexFunc(local, func(pt *ledPartition) bool { return pt.topicPartition == k })
		done := j >= 0 && local[j].stopDone
		r.mu.Unlock()
		if j >= 0 {
			if !done {
				return false, nil
			}
			continue
		}
		st, err := r.p.store.Read(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: t.Name, Partition: int32(i)}, t.ID)
		if err != nil {
			return false, err
		}
		if !(st.State == mirrorstate.Stopping && st.StopDone) && st.State != mirrorstate.Stopped {
			return false, nil
		}
	}
	return true, nil
}
