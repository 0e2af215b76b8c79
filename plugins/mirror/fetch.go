package mirror

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/wire"
)

// The fetch itself (KIP-1279's MirrorFetcherThread: the Fetch request,
// the fetcher's own client, the trim of each answer, the throttle) is
// the fetch package's. Here is the run's side of it: which fetchers run,
// the partitions each fetches, and what an answer does to a partition.

func (r *mirrorRun) fetcherOf(pt *ledPartition) fetch.Key {
	return fetch.KeyOf(pt.topic, pt.partition, pt.leader, r.p.cfg.Fetchers)
}

// syncFetchers runs one fetcher for each source broker and fetcher id
// that leads some of parts, and stops the others.
func (r *mirrorRun) syncFetchers(parts []*ledPartition) {
	want := map[fetch.Key]bool{}
	r.mu.Lock()
	for _, pt := range parts {
		if pt.leader >= 0 {
			want[r.fetcherOf(pt)] = true
		}
	}
	var stale []*fetch.Fetcher
	for k, f := range r.fetchers {
		if !want[k] {
			stale = append(stale, f)
			delete(r.fetchers, k)
		}
	}
	for k := range want {
		if r.fetchers[k] == nil {
			f := r.newFetcher(k)
			r.fetchers[k] = f
			go r.p.Contain(f.Run)
		}
	}
	r.mu.Unlock()
	for _, f := range stale {
		f.Stop()
	}
}

// newFetcher returns fetcher k, with its counters labelled with its
// source broker's address; r.mu is held.
func (r *mirrorRun) newFetcher(k fetch.Key) *fetch.Fetcher {
	host, port := "", int32(0)
	if m := r.src.meta; m != nil {
		for _, b := range m.Brokers {
			if b.NodeID == k.Broker {
				host, port = b.Host, b.Port
			}
		}
	}
	stats := r.p.metrics.fetcherStats(r, k, host, port)
	cfg := r.p.cfg
	return fetch.New(r.ctx, k, fetch.Config{
		Mirror:            r.name,
		NodeID:            r.p.Host().NodeID(),
		ClientOpts:        func() ([]kgo.Opt, error) { return clientOpts(r.configs, cfg) },
		RequestTimeout:    cfg.RequestTimeout,
		MaxWait:           cfg.FetchMaxWait,
		MinBytes:          cfg.FetchMinBytes,
		MaxBytes:          cfg.FetchRespMaxBytes,
		PartitionMaxBytes: cfg.FetchMaxBytes,
		Backoff:           cfg.Backoff,
		Rate:              r.p.throttledRate,
		Log:               r.log,
		Requests:          stats.requests,
		Bytes:             stats.bytes,
	}, &fetchTarget{r: r, key: k})
}

// fetchTarget is the run as fetcher key sees it: it fetches the MIRRORING
// partitions whose source leader is key's broker and that hash to it, and
// keeps the source end offsets of those it does not fetch (paused ones)
// fresh. The fetcher calls it from its goroutine only.
type fetchTarget struct {
	r   *mirrorRun
	key fetch.Key
	// The round's, from Partitions: the fetcher's partitions, and of
	// those the MIRRORING ones.
	parts, mirroring []*ledPartition
}

var _ fetch.Refresher = (*fetchTarget)(nil)

// mine reports whether pt is this fetcher's.
func (t *fetchTarget) mine(pt *ledPartition) bool {
	return pt.leader >= 0 && t.r.fetcherOf(pt) == t.key && needsSource(pt.state)
}

// Partitions implements fetch.Target: the MIRRORING partitions open
// here, from their log ends (or the source's log start to move to), with
// the source leader epoch as CurrentLeaderEpoch (the source fences a
// stale one, and the fetcher drops batches above it: KAFKA-18723).
func (t *fetchTarget) Partitions() ([]fetch.Partition, error) {
	r := t.r
	t.parts = r.sortedParts(t.mine)
	t.mirroring = nil
	r.mu.Lock()
	for _, pt := range t.parts {
		if pt.state == mirrorstate.Mirroring {
			t.mirroring = append(t.mirroring, pt)
		}
	}
	r.mu.Unlock()
	if len(t.mirroring) == 0 {
		return nil, nil
	}
	var out []fetch.Partition
	for _, pt := range t.mirroring {
		r.mu.Lock()
		epoch, logStartTo := pt.leaderEpoch, pt.logStartTo
		r.mu.Unlock()
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		offs := ep.Offsets()
		p := fetch.Partition{Topic: pt.topic, TopicID: pt.id, Partition: pt.partition,
			FetchOffset: max(offs.LogEnd, logStartTo), LeaderEpoch: epoch, LastFetchedEpoch: -1}
		if offs.LogEnd > offs.LogStart && logStartTo < 0 {
			p.LastFetchedEpoch = ep.EpochAt(offs.LogEnd - 1)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("no partition of this fetcher is open here yet") // nothing to wait for at the source
	}
	return out, nil
}

// Unreachable implements fetch.Target: the source broker may be gone, so
// its partitions' leaders are asked again.
func (t *fetchTarget) Unreachable(err error) error {
	r := t.r
	err = r.sourceErr(fmt.Sprintf("a fetch from broker %d", t.key.Broker), err)
	r.setTrouble(t.mirroring, err)
	r.markStale()
	return err
}

// Answered implements fetch.Target.
func (t *fetchTarget) Answered(err error) {
	t.r.contacted()
	if err != nil {
		t.r.setTrouble(t.mirroring, err)
	}
}

// Apply implements fetch.Target with applyPartition.
func (t *fetchTarget) Apply(p fetch.Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	i := slices.IndexFunc(t.mirroring, func(pt *ledPartition) bool { return pt.topic == p.Topic && pt.partition == p.Partition })
	if i < 0 {
		return 0, nil, nil
	}
	return t.r.applyPartition(t.mirroring[i], rp)
}

// Refresh implements fetch.Refresher with refreshEnds.
func (t *fetchTarget) Refresh() { t.r.refreshEnds(t.key.Broker, t.parts) }

// applyPartition applies one partition of a fetch response: truncation on
// a diverging epoch or a log start past our end, then the batches,
// appended unchanged. It works only on a partition still MIRRORING, with
// applyMu held. The append is written before it returns; wait (nil when
// nothing was appended) waits until it is durable and finishes the
// partition's bookkeeping, without applyMu, so that the fetch waits
// for its partitions' fsyncs together. The fetcher has trimmed the
// batches to whole ones not above the epoch it fetched for.
func (r *mirrorRun) applyPartition(pt *ledPartition, rp *kmsg.FetchResponseTopicPartition) (n int, wait func() error, err error) {
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
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
		return 0, nil, nil // taken from the fetcher meanwhile
	}
	ep, err := r.partition(pt)
	if err != nil {
		return 0, nil, err
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
		r.log.Info("mirror epoch truncation", "topic", pt.topic, "partition", pt.partition, "epoch", d.Epoch, "offset", to)
		if err := r.truncate(pt, ep, to, fmt.Sprintf("diverging epoch %d", d.Epoch)); err != nil {
			return 0, nil, r.fail(pt, fmt.Errorf("epoch truncation to %d: %w", to, err))
		}
		return 1, nil, nil
	}
	batches := rp.RecordBatches
	if len(batches) == 0 {
		r.caughtUp(pt, ep)
		return 0, nil, nil
	}
	appended := ep.AppendAsync(r.ctx, &engine.AppendRequest{Topic: pt.topic, TopicID: pt.id, Partition: pt.partition,
		Origin: engine.OriginMirror, Records: batches, Acks: -1})
	return len(batches), func() error {
		_, err := appended()
		switch {
		case errors.Is(err, wire.ErrMirrorLeaderEpochExceeded):
			r.scheduleBump(pt.topic, pt.partition, maxBatchEpoch(batches))
			return r.setState(pt, mirrorstate.EpochFencing, "")
		case errors.Is(err, engine.ErrUnexpectedAppendOffset):
			return err // our log moved meanwhile: fetch again from its end
		case err != nil:
			if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
				return nil // the validator saw it taken away first
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
					r.log.Warn("mirror: move log start", "topic", pt.topic, "partition", pt.partition, "err", err)
				}
			}
			r.applyMu.Unlock()
		}
		r.caughtUp(pt, ep)
		return nil
	}, nil
}

// caughtUp records the partition's log end after an apply, and whether it
// holds all of the source's end offset last learned.
func (r *mirrorRun) caughtUp(pt *ledPartition, ep *engine.Partition) {
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
	switch leo := ep.Offsets().LogEnd; {
	case leo < start:
		r.log.Info("mirror: source log start is past our end; restarting there", "topic", pt.topic, "partition", pt.partition, "start", start)
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

// listOffsets asks a source broker for one timestamp's offsets of parts.
func (r *mirrorRun) listOffsets(broker int32, ts int64, parts []*ledPartition) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	for _, pt := range parts {
		i, ok := idx[pt.topic]
		if !ok {
			i = len(req.Topics)
			idx[pt.topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = pt.topic
			req.Topics = append(req.Topics, rt)
		}
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = pt.partition, ts, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, lp)
	}
	resp, err := r.request(broker, req)
	if err != nil {
		return nil, r.sourceErr(fmt.Sprintf("ListOffsets to broker %d", broker), err)
	}
	r.contacted()
	out := map[topicPartition]kmsg.ListOffsetsResponseTopicPartition{}
	for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
		for _, rp := range rt.Partitions {
			out[topicPartition{rt.Topic, rp.Partition}] = rp
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
