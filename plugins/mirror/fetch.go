package mirror

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/internal/kafkaclient"
	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// The fetch itself (KIP-1279's MirrorFetcherThread: the Fetch request,
// the fetcher's own client, the trim of each answer, the throttle) is
// the fetch package's. Here is the run's side of it: which fetchers run,
// the partitions each fetches, and what an answer does to a partition.

// fetcherOf is the fetcher of pt given its source leader; r.mu is held.
func (r *mirrorRun) fetcherOf(pt *ledPartition) fetch.Key {
	return fetch.KeyOf(pt.topic, pt.partition, pt.leader, r.fetcherCount())
}

// Fetchers of a source broker over a long link. One Fetch is in flight
// per fetcher, over one TCP connection, which carries at most its
// window per round trip: Linux grows a sender's window to
// net.ipv4.tcp_wmem's maximum, 4 MiB by default, so one connection
// carries at most 40 MB/s over 100 ms. Unless mirror.num.replica.fetchers
// is set, a source broker therefore gets a fetcher (and a connection,
// and a fetch session) per fetchRTTStep of round trip, up to maxFetchers,
// and a topic's partitions are spread over them (fetch.KeyOf).
const (
	fetchRTTStep = 20 * time.Millisecond
	maxFetchers  = 8
)

// fetcherCount is how many fetchers each source broker gets; r.mu is
// held.
func (r *mirrorRun) fetcherCount() int {
	if n := r.p.cfg.Fetchers; n > 0 {
		return n
	}
	return fetchersFor(r.src.rtt)
}

// fetchersFor is the fetchers per source broker for a round trip rtt.
func fetchersFor(rtt time.Duration) int {
	return max(1, min(maxFetchers, int((rtt+fetchRTTStep-1)/fetchRTTStep)))
}

// changed tells the fetchers that their partitions or positions changed
// other than by their own appends (fetch.Target.Generation).
func (r *mirrorRun) changed() {
	r.gen.Add(1)
	r.mu.Lock()
	fs := slices.Collect(maps.Values(r.fetchers))
	r.mu.Unlock()
	for _, f := range fs {
		f.Poke()
	}
}

// syncFetchers runs one fetcher for each source broker and fetcher id
// that leads some of parts, and stops the others.
func (r *mirrorRun) syncFetchers(parts []*ledPartition) {
	want := map[fetch.Key]bool{}
	r.mu.Lock()
	for _, pt := range parts {
		if pt.leader >= 0 {
			want[pt.fetchKey] = true
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
	if len(stale) > 0 {
		r.mu.Lock()
		for _, pt := range r.parts { // rare: a source broker left
			if pt.fetcher != nil && r.fetchers[pt.fetcher.key] == nil {
				pt.fetcher = nil
			}
		}
		r.mu.Unlock()
	}
}

// newFetcher returns fetcher k, with its counters labelled with its
// source broker's address; r.mu is held.
func (r *mirrorRun) newFetcher(k fetch.Key) *fetch.Fetcher {
	host, port := r.brokerAddr(k.Broker)
	stats := r.p.metrics.fetcherStats(r, k, host, port)
	cfg := r.p.cfg
	sec, err := kafkaclient.Security(r.configs)
	if err != nil { // validated when the mirror was created or altered
		r.log.Warn("mirror fetcher security settings", "err", err)
	}
	return fetch.New(r.ctx, k, fetch.Config{
		Mirror:            r.name,
		NodeID:            r.p.Host().NodeID(),
		Addr:              r.sourceBrokerAddr,
		TLS:               sec.TLS,
		SASL:              sec.SASL,
		ConnectTimeout:    cfg.ConnectTimeout,
		RequestTimeout:    cfg.RequestTimeout,
		MaxWait:           cfg.FetchMaxWait,
		MinBytes:          cfg.FetchMinBytes,
		MaxBytes:          r.startAnswer(),
		PartitionMaxBytes: cfg.FetchMaxBytes,
		FixedSizes:        cfg.FetchSizesFixed,
		Budget:            r.p.fetchBudget,
		Backoff:           cfg.Backoff,
		Rate:              r.p.throttledRate,
		Log:               r.log,
		Requests:          stats.requests,
		Bytes:             stats.bytes,
	}, &fetchTarget{r: r, key: k})
}

// startAnswer is where a fetcher's answer limit starts: the configured
// replica.fetch.response.max.bytes when it is fixed, else Kafka's default
// shared by the source broker's fetchers (they grow from there); r.mu is
// held.
func (r *mirrorRun) startAnswer() int32 {
	if r.p.cfg.FetchSizesFixed {
		return r.p.cfg.FetchRespMaxBytes
	}
	return max(r.p.cfg.FetchMaxBytes, r.p.cfg.FetchRespMaxBytes/int32(r.fetcherCount()))
}

// brokerAddr is a source broker's host and port in the source's
// metadata; r.mu is held.
func (r *mirrorRun) brokerAddr(id int32) (string, int32) {
	if m := r.src.meta; m != nil {
		for _, b := range m.Brokers {
			if b.NodeID == id {
				return b.Host, b.Port
			}
		}
	}
	return "", 0
}

// sourceBrokerAddr is fetch.Config.Addr: where source broker id is now.
func (r *mirrorRun) sourceBrokerAddr(id int32) (string, error) {
	r.mu.Lock()
	host, port := r.brokerAddr(id)
	r.mu.Unlock()
	if host == "" {
		return "", fmt.Errorf("source broker %d is not in the source's metadata: %w", id, kerr.BrokerNotAvailable)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// fetchTarget is the run as fetcher key sees it: it fetches the MIRRORING
// partitions whose source leader is key's broker and that hash to it, and
// keeps the source end offsets of those it does not fetch (paused ones)
// fresh. The fetcher calls it from its goroutine only.
type fetchTarget struct {
	r   *mirrorRun
	key fetch.Key
	// Guarded by r.mu: what the fetcher's session last told of all its
	// partitions (ledPartition.endAt).
	answeredAt time.Time // when the last answer's Fetch was sent
	trouble    string    // why the fetcher cannot fetch now ("" when it can)
	troubleAt  time.Time
	cutOff     bool // trouble is the source's (ledPartition.cutOff)
	// The fetcher goroutine's own, from Partitions: the fetcher's
	// partitions (paused ones too), and those it fetches.
	parts     []*ledPartition
	mirroring map[topicPartition]*ledPartition // by source name (fetch.Partition.Topic)
}

var _ fetch.Refresher = (*fetchTarget)(nil)

// mine reports whether pt is this fetcher's; r.mu is held.
func (t *fetchTarget) mine(pt *ledPartition) bool {
	return pt.leader >= 0 && pt.fetchKey == t.key && needsSource(pt.state)
}

// Generation implements fetch.Target.
func (t *fetchTarget) Generation() uint64 { return t.r.gen.Load() }

// Partitions implements fetch.Target: the MIRRORING partitions open
// here, from their log ends (or the source's log start to move to), with
// the source leader epoch as CurrentLeaderEpoch (the source fences a
// stale one, and the fetcher drops batches above it: KAFKA-18723). It
// walks every partition of the run, which it does only when they
// changed.
func (t *fetchTarget) Partitions() ([]fetch.Partition, error) {
	r := t.r
	now := time.Now()
	t.parts, t.mirroring = t.parts[:0], map[topicPartition]*ledPartition{}
	type want struct {
		pt         *ledPartition
		epoch      int32
		logStartTo int64
	}
	var wants []want
	r.mu.Lock()
	for _, pt := range r.parts {
		mine := t.mine(pt)
		if mine {
			t.parts = append(t.parts, pt)
		}
		if !mine || pt.state != mirrorstate.Mirroring {
			if pt.fetcher == t {
				pt.fetcher = nil
			}
			continue
		}
		if pt.fetcher != t {
			pt.fetcher, pt.fetchedSince = t, now
		}
		t.mirroring[topicPartition{pt.src, pt.partition}] = pt
		wants = append(wants, want{pt, pt.leaderEpoch, pt.logStartTo})
	}
	r.mu.Unlock()
	if len(wants) == 0 {
		return nil, nil
	}
	out := make([]fetch.Partition, 0, len(wants))
	for _, w := range wants {
		pt := w.pt
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		offs := ep.Offsets()
		p := fetch.Partition{Topic: pt.src, TopicID: pt.id, Partition: pt.partition,
			FetchOffset: max(offs.LogEnd, w.logStartTo), LeaderEpoch: w.epoch, LastFetchedEpoch: -1}
		if offs.LogEnd > offs.LogStart && w.logStartTo < 0 {
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
	t.setTrouble(err)
	r.markStale()
	return err
}

// Answered implements fetch.Target.
func (t *fetchTarget) Answered(sent time.Time, err error) {
	t.r.contacted()
	t.setTrouble(err)
	if err == nil {
		t.r.mu.Lock()
		t.answeredAt = sent
		t.r.mu.Unlock()
	}
}

// setTrouble records why the fetcher cannot fetch now (nil: it can).
func (t *fetchTarget) setTrouble(err error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	switch {
	case err == nil:
		t.trouble = ""
	case t.trouble == "":
		t.trouble, t.troubleAt = err.Error(), time.Now()
	default:
		t.trouble = err.Error()
	}
	t.cutOff = errors.Is(err, mirrorproto.ErrMirrorSourceUnavailable)
}

// Apply implements fetch.Target with applyPartition.
func (t *fetchTarget) Apply(p fetch.Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	pt := t.mirroring[topicPartition{p.Topic, p.Partition}]
	if pt == nil {
		return 0, nil, nil
	}
	return t.r.applyPartition(pt, p.FetchOffset, rp)
}

// Refresh implements fetch.Refresher with refreshEnds.
func (t *fetchTarget) Refresh() { t.r.refreshEnds(t.key.Broker, t.parts) }

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
					r.log.Warn("mirror: move log start", "topic", pt.topic, "partition", pt.partition, "err", err)
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
func (r *mirrorRun) appendFetched(pt *ledPartition, from int64, rp *kmsg.FetchResponseTopicPartition) (ep *engine.Partition, written func() (engine.AppendResult, error), err error) {
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
		r.log.Info("mirror epoch truncation", "topic", pt.topic, "partition", pt.partition, "epoch", d.Epoch, "offset", to)
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
	written, err = ep.Write(r.ctx, &engine.AppendRequest{Topic: pt.topic, TopicID: pt.id, Partition: pt.partition,
		Origin: engine.OriginMirror, Records: rp.RecordBatches, Acks: -1})
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
		r.scheduleBump(pt.topic, pt.partition, maxBatchEpoch(batches))
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
	defer r.changed() // the fetcher's position moved
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

// listOffsets asks a source broker for one timestamp's offsets of parts,
// by their names here.
func (r *mirrorRun) listOffsets(broker int32, ts int64, parts []*ledPartition) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	here := map[string]string{} // source names to ours
	for _, pt := range parts {
		i, ok := idx[pt.src]
		if !ok {
			i = len(req.Topics)
			idx[pt.src], here[pt.src] = i, pt.topic
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = pt.src
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
		name, ok := here[rt.Topic]
		if !ok {
			continue
		}
		for _, rp := range rt.Partitions {
			out[topicPartition{name, rp.Partition}] = rp
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
