package share

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// A share-partition is a topic partition as one share group consumes it,
// kept in memory by the partition's leader (Kafka's SharePartition).
// Below its start offset (SPSO) every record is done; from the start to
// its end offset (SPEO) each record is available (to be delivered again),
// acquired by a member until its lock expires, acknowledged or archived;
// from the end on, records have not been delivered yet. Fetching
// acquires records (delivery count + 1); ACCEPT acknowledges them,
// RELEASE makes them available again, REJECT archives them, as does a
// release at the delivery count limit. The start moves past the records
// that are done. Every acknowledgement, release and lock expiry is
// written to the share coordinator before it is answered, so that after
// a restart accepted records are never delivered again and records that
// were in flight are delivered again (at least once).

// maxWindow bounds the offsets a share-partition holds in memory, beyond
// group.share.partition.max.record.locks, against a state that says
// otherwise.
const maxWindow = 100_000

// inflight is the state of one offset between the start and the end.
type inflight struct {
	state    int8
	count    int16
	member   string
	deadline time.Time
}

type sharePartition struct {
	p     *Plugin
	key   stateKey
	topic string

	mu          sync.Mutex
	loaded      bool
	gone        bool // evicted: callers take a fresh one
	stateEpoch  int32
	leaderEpoch int32
	start, end  int64
	recs        map[int64]*inflight
	timer       *lockTimer
	wake        chan struct{} // closed when records become available again
}

// lockTimer fires at the earliest lock deadline of a share-partition.
type lockTimer struct{ t *time.Timer }

// withPartition runs fn on the loaded share-partition of k, with its lock
// held.
func (p *Plugin) withPartition(ctx context.Context, k stateKey, topic string, fn func(sp *sharePartition) error) error {
	for {
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return kerr.CoordinatorNotAvailable
		}
		sp := p.parts[k]
		if sp == nil {
			sp = &sharePartition{p: p, key: k, topic: topic, wake: make(chan struct{})}
			p.parts[k] = sp
		}
		p.mu.Unlock()
		sp.mu.Lock()
		if sp.gone {
			sp.mu.Unlock()
			continue
		}
		if !sp.loaded {
			start := time.Now()
			if err := sp.load(ctx); err != nil {
				sp.mu.Unlock()
				p.evict(k)
				return err
			}
			p.stats().loads.UpdateDuration(start)
		}
		err := fn(sp)
		sp.mu.Unlock()
		if errors.Is(err, kerr.FencedStateEpoch) {
			p.evict(k) // the state was initialized again: reload it
		}
		return err
	}
}

// evict forgets a share-partition (its state was initialized or deleted,
// or leadership moved): the next use loads it again.
func (p *Plugin) evict(k stateKey) {
	p.mu.Lock()
	sp := p.parts[k]
	delete(p.parts, k)
	p.mu.Unlock()
	if sp != nil {
		sp.mu.Lock()
		sp.drop()
		sp.mu.Unlock()
	}
}

func (sp *sharePartition) drop() {
	sp.gone = true
	sp.stopTimer()
	sp.notify()
}

// stopTimer stops the lock timer; a callback that can no longer run is
// no longer waited for.
func (sp *sharePartition) stopTimer() {
	if sp.timer != nil && sp.timer.t.Stop() {
		sp.p.wg.Done()
	}
	sp.timer = nil
}

// notify wakes fetches waiting for records to become available.
func (sp *sharePartition) notify() {
	close(sp.wake)
	sp.wake = make(chan struct{})
}

func (sp *sharePartition) enginePartition() (plugin.Log, error) {
	h := sp.p.Host()
	if h == nil {
		return nil, kerr.CoordinatorNotAvailable
	}
	ep := h.Partition(engine.TopicID(sp.key.topic), sp.key.partition)
	if ep == nil {
		return nil, fmt.Errorf("%s-%d is not here: %w", sp.topic, sp.key.partition, kerr.NotLeaderForPartition)
	}
	return ep, nil
}

// load reads the durable state, initializing it on first use from
// share.auto.offset.reset.
func (sp *sharePartition) load(ctx context.Context) error {
	ep, err := sp.enginePartition()
	if err != nil {
		return err
	}
	k := sp.key
	cfg := sp.p.groupConfig(k.group)
	var st *shareState
	node, remote, err := sp.p.stateCoordinator(ctx, k)
	switch {
	case err != nil:
	case remote:
		// Read, and initialize first if there is nothing to read.
		st, err = sp.p.remoteRead(ctx, node, k, ep.Offsets().LeaderEpoch)
		if err == nil && st.start < 0 {
			if err = sp.p.remoteInitialize(ctx, node, k, st.stateEpoch, resetOffset(cfg, ep)); err == nil {
				st, err = sp.p.remoteRead(ctx, node, k, ep.Offsets().LeaderEpoch)
			}
		}
	default:
		err = sp.loadLocal(ctx, k, cfg, ep, &st)
	}
	if err != nil {
		return fmt.Errorf("share state of %s-%d: %w", sp.topic, k.partition, err)
	}
	sp.apply(st, ep)
	return nil
}

// loadLocal reads k's state from the shard here, initializing it first
// if it has none.
func (sp *sharePartition) loadLocal(ctx context.Context, k stateKey, cfg plugin.ShareGroupConfig, ep plugin.Log, out **shareState) error {
	return sp.p.onState(ctx, k, func(s *states) error {
		cur := s.m[k]
		if cur == nil || cur.start < 0 {
			start := resetOffset(cfg, ep)
			epoch := int32(0)
			if cur != nil {
				epoch = cur.stateEpoch
			}
			if err := s.initialize(k, epoch, start); err != nil {
				return err
			}
			cur = s.m[k]
		}
		c := *cur
		c.batches = slices.Clone(cur.batches)
		*out = &c
		return nil
	})
}

// apply makes st, just read, the share-partition's state in memory.
func (sp *sharePartition) apply(st *shareState, ep plugin.Log) {
	sp.stateEpoch, sp.leaderEpoch = st.stateEpoch, ep.Offsets().LeaderEpoch
	sp.start, sp.end = st.start, st.start
	sp.recs = map[int64]*inflight{}
	for _, b := range st.batches {
		for o := max(b.first, st.start); o <= b.last && o < st.start+maxWindow; o++ {
			state := b.state
			if state == stateAcquired {
				state = stateAvailable // in flight when the state was written
			}
			sp.recs[o] = &inflight{state: state, count: b.count}
			sp.end = max(sp.end, o+1)
		}
	}
	for o := sp.start; o < sp.end; o++ {
		if sp.recs[o] == nil {
			sp.recs[o] = &inflight{state: stateAvailable}
		}
	}
	sp.advance()
	sp.loaded = true
}

// resetOffset is where a share-partition without state starts.
func resetOffset(cfg plugin.ShareGroupConfig, ep plugin.Log) int64 {
	offs := ep.Offsets()
	switch cfg.AutoOffsetReset {
	case "earliest":
		return offs.LogStart
	case "by_duration":
		if o, _, _, ok := ep.OffsetForTimestamp(time.Now().Add(-cfg.ResetDuration).UnixMilli()); ok {
			return o
		}
	}
	if cfg.ReadCommitted {
		return offs.LastStable
	}
	return offs.HighWatermark
}

// advance moves the start past the records that are done.
func (sp *sharePartition) advance() {
	for sp.start < sp.end {
		r := sp.recs[sp.start]
		if r != nil && r.state != stateAcked && r.state != stateArchived {
			return
		}
		delete(sp.recs, sp.start)
		sp.start++
	}
}

// skipTo moves the start to the log start when retention deleted records
// the share-partition had not finished.
func (sp *sharePartition) skipTo(logStart int64) {
	for o := sp.start; o < logStart && o < sp.end; o++ {
		delete(sp.recs, o)
	}
	if sp.start < logStart {
		sp.start = logStart
		sp.end = max(sp.end, logStart)
	}
}

// fetchLimits bound one acquisition.
type fetchLimits struct {
	maxRecords int
	maxBytes   int
	strict     bool // ShareAcquireMode 1: never more records than maxRecords
}

// acquire gives member up to the limits' records: available ones first
// (delivered again), then records not delivered yet. It returns the
// stored batches that hold them and the acquired ranges.
func (sp *sharePartition) acquire(member string, lim fetchLimits, now time.Time) ([][]byte, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	ep, err := sp.enginePartition()
	if err != nil {
		return nil, nil, err
	}
	cfg := sp.p.groupConfig(sp.key.group)
	offs := ep.Offsets()
	sp.skipTo(offs.LogStart)
	a := &acquisition{sp: sp, member: member, lim: lim, cfg: cfg, limit: offs.HighWatermark, aborted: map[int64][]int64{}}
	iso := engine.ReadUncommitted
	if cfg.ReadCommitted {
		a.limit, iso = offs.LastStable, engine.ReadCommitted
	}
	for o := sp.start; o < sp.end && len(a.want) < lim.maxRecords; o++ {
		if sp.recs[o].state == stateAvailable {
			a.want = append(a.want, o)
		}
	}
	if len(a.want) == 0 && !a.fresh() {
		return nil, nil, nil
	}
	from := sp.end
	if len(a.want) > 0 {
		from = a.want[0]
	}
	a.deadline = now.Add(cfg.RecordLock)
	var raws [][]byte
	bytes := 0
	for a.wi < len(a.want) || a.fresh() {
		if bytes >= lim.maxBytes && len(raws) > 0 {
			break
		}
		res, err := ep.Fetch(from, max(lim.maxBytes-bytes, 1), iso)
		if err != nil {
			return nil, nil, err
		}
		for _, at := range res.AbortedTxns {
			if !slices.Contains(a.aborted[at.ProducerID], at.FirstOffset) {
				a.aborted[at.ProducerID] = append(a.aborted[at.ProducerID], at.FirstOffset)
			}
		}
		if len(res.Batches) == 0 {
			break
		}
		for _, raw := range res.Batches {
			h, err := engine.ParseBatchHeader(raw)
			if err != nil {
				return nil, nil, err
			}
			from = h.LastOffset() + 1
			if a.batch(h) {
				raws = append(raws, raw)
				bytes += len(raw)
			}
			if a.wi >= len(a.want) && !a.fresh() {
				break
			}
		}
		if from >= a.limit {
			break
		}
	}
	sp.advance()
	if len(a.acquired) > 0 {
		sp.p.stats().acquired.Add(len(a.acquired))
		sp.arm()
	}
	return raws, ranges(a.acquired, sp.recs), nil
}

// acquisition is one acquire of a share-partition's records for member.
type acquisition struct {
	sp     *sharePartition
	member string
	lim    fetchLimits
	cfg    plugin.ShareGroupConfig
	limit  int64 // the high watermark, or the last stable offset for read_committed

	deadline time.Time // of the acquisition lock
	// want are the available records to deliver again, wi the first not
	// passed yet.
	want     []int64
	wi       int
	acquired []int64
	aborted  map[int64][]int64 // producer → first offsets of its aborted transactions not passed yet
}

// fresh says records not delivered yet may be acquired too: there are
// some, the in-flight window has room, and the limit is not reached.
func (a *acquisition) fresh() bool {
	sp := a.sp
	return sp.end < a.limit && sp.end-sp.start < int64(a.cfg.MaxRecordLocks) && len(a.acquired) < a.lim.maxRecords
}

// take acquires record o for the member.
func (a *acquisition) take(o int64) {
	sp := a.sp
	r := sp.recs[o]
	if r == nil {
		r = &inflight{}
		sp.recs[o] = r
	}
	r.state, r.count, r.member, r.deadline = stateAcquired, r.count+1, a.member, a.deadline
	a.acquired = append(a.acquired, o)
}

// batch acquires what the member gets of the batch with header h: the
// wanted records in it, and records not delivered yet (markers and
// aborted records are archived instead, never delivered). It says whether
// the batch goes in the response.
func (a *acquisition) batch(h engine.BatchHeader) (include bool) {
	sp, lim := a.sp, a.lim
	base, last := h.BaseOffset, h.LastOffset()
	for ; a.wi < len(a.want) && a.want[a.wi] <= last; a.wi++ {
		if a.want[a.wi] >= base {
			a.take(a.want[a.wi])
			include = true
		}
	}
	if last < sp.end || !a.fresh() {
		return include
	}
	lo, hi := max(base, sp.end), last
	control, txn := h.Attributes&0x20 != 0, h.Attributes&0x10 != 0
	if control && txn {
		if fs := a.aborted[h.ProducerID]; len(fs) > 0 && fs[0] <= base {
			a.aborted[h.ProducerID] = fs[1:] // the abort marker ends that transaction
		}
	}
	isAborted := txn && !control && a.cfg.ReadCommitted && slices.ContainsFunc(a.aborted[h.ProducerID], func(f int64) bool { return f <= base })
	if control || isAborted {
		// Markers and aborted records are never delivered.
		for o := lo; o <= hi; o++ {
			sp.recs[o] = &inflight{state: stateArchived}
		}
		sp.end = hi + 1
		return include
	}
	if lim.strict {
		hi = min(hi, lo+int64(lim.maxRecords-len(a.acquired))-1)
	}
	for o := lo; o <= hi; o++ {
		a.take(o)
	}
	sp.end = hi + 1
	return true
}

// ranges groups acquired offsets into runs of the same delivery count.
func ranges(offsets []int64, recs map[int64]*inflight) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
	slices.Sort(offsets)
	var out []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	for _, o := range offsets {
		c := recs[o].count
		if n := len(out); n > 0 && out[n-1].LastOffset == o-1 && out[n-1].DeliveryCount == c {
			out[n-1].LastOffset = o
			continue
		}
		out = append(out, kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{FirstOffset: o, LastOffset: o, DeliveryCount: c})
	}
	return out
}

// Acknowledgement types (Kafka's AcknowledgeType, KIP-932 and KIP-1222).
const (
	ackGap     int8 = 0
	ackAccept  int8 = 1
	ackRelease int8 = 2
	ackReject  int8 = 3
	ackRenew   int8 = 4
)

// ackBatch is one acknowledgement batch of a request.
type ackBatch struct {
	first, last int64
	types       []int8
}

// ack applies member's acknowledgements, all or none: each offset must be
// acquired by member. RENEW (allowed with renew) extends the locks.
func (sp *sharePartition) ack(ctx context.Context, member string, batches []ackBatch, renew bool) error {
	cfg := sp.p.groupConfig(sp.key.group)
	for _, b := range batches {
		switch n := b.last - b.first + 1; {
		case n <= 0 || len(b.types) != 1 && int64(len(b.types)) != n:
			return fmt.Errorf("acknowledgement batch %d-%d with %d types: %w", b.first, b.last, len(b.types), kerr.InvalidRequest)
		case b.first < sp.start || b.last >= sp.end:
			return fmt.Errorf("offsets %d-%d are not in flight (%d-%d): %w", b.first, b.last, sp.start, sp.end-1, kerr.InvalidRecordState)
		}
		for i, t := range b.types {
			if t < ackGap || t > ackRenew || t == ackRenew && !renew {
				return fmt.Errorf("acknowledge type %d at %d: %w", t, b.first+int64(i), kerr.InvalidRequest)
			}
		}
		for o := b.first; o <= b.last; o++ {
			if r := sp.recs[o]; r.state != stateAcquired || r.member != member {
				return fmt.Errorf("offset %d is not acquired by member %s: %w", o, member, kerr.InvalidRecordState)
			}
		}
	}
	released, changed := false, false
	now := time.Now()
	stats := sp.p.stats()
	for _, b := range batches {
		for o := b.first; o <= b.last; o++ {
			t := b.types[0]
			if len(b.types) > 1 {
				t = b.types[o-b.first]
			}
			if c := stats.acked[t]; c != nil { // gaps are no records
				c.Inc()
			}
			r := sp.recs[o]
			switch t {
			case ackAccept:
				r.state, changed = stateAcked, true
			case ackGap, ackReject:
				r.state, changed = stateArchived, true
			case ackRelease:
				released = sp.release(r, cfg) || released
				changed = true
			case ackRenew:
				r.deadline = now.Add(cfg.RecordLock)
			}
		}
	}
	sp.advance()
	if released {
		sp.notify()
	}
	sp.arm()
	if !changed {
		return nil
	}
	return sp.persist(ctx)
}

// release makes an acquired record available again, or archives it at
// the delivery count limit; it reports whether it became available.
func (sp *sharePartition) release(r *inflight, cfg plugin.ShareGroupConfig) bool {
	r.member = ""
	if int(r.count) >= cfg.DeliveryLimit {
		r.state = stateArchived
		sp.p.stats().limitArchived.Inc()
		return false
	}
	r.state = stateAvailable
	return true
}

// releaseMember releases every record member holds (its session ended or
// it left the group).
func (sp *sharePartition) releaseMember(ctx context.Context, member string) error {
	cfg := sp.p.groupConfig(sp.key.group)
	changed := false
	for o := sp.start; o < sp.end; o++ {
		if r := sp.recs[o]; r.state == stateAcquired && r.member == member {
			sp.release(r, cfg)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	sp.advance()
	sp.notify()
	return sp.persist(ctx)
}

// arm sets the lock timer to the earliest lock deadline.
func (sp *sharePartition) arm() {
	var next time.Time
	for o := sp.start; o < sp.end; o++ {
		if r := sp.recs[o]; r.state == stateAcquired && (next.IsZero() || r.deadline.Before(next)) {
			next = r.deadline
		}
	}
	sp.stopTimer()
	if next.IsZero() || sp.gone {
		return
	}
	sp.p.wg.Add(1)
	lt := &lockTimer{}
	lt.t = time.AfterFunc(time.Until(next), func() {
		defer sp.p.wg.Done()
		sp.p.Contain(func() { sp.expire(lt) })
	})
	sp.timer = lt
}

// expire releases the records whose lock expired (timer t fired).
func (sp *sharePartition) expire(t *lockTimer) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.timer == t {
		sp.timer = nil
	}
	if sp.gone {
		return
	}
	cfg := sp.p.groupConfig(sp.key.group)
	now := time.Now()
	changed := false
	for o := sp.start; o < sp.end; o++ {
		if r := sp.recs[o]; r.state == stateAcquired && !r.deadline.After(now) {
			sp.p.stats().expired.Inc()
			sp.release(r, cfg)
			changed = true
		}
	}
	if changed {
		sp.advance()
		sp.notify()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := sp.persist(ctx); err != nil {
			sp.p.log.Warn("writing share state after lock expiry", "group", sp.key.group, "topic", sp.topic, "partition", sp.key.partition, "err", err)
		}
		cancel()
	}
	sp.arm()
}

// persist writes the share-partition's state to the share coordinator:
// the start, and every offset in flight that is not a fresh one (an
// acquired record is written as available, with its delivery count).
func (sp *sharePartition) persist(ctx context.Context) error {
	var batches []stateBatch
	for o := sp.start; o < sp.end; o++ {
		r := sp.recs[o]
		state := r.state
		if state == stateAcquired {
			state = stateAvailable
		}
		if state == stateAvailable && r.count == 0 {
			continue
		}
		if n := len(batches); n > 0 && batches[n-1].last == o-1 && batches[n-1].state == state && batches[n-1].count == r.count {
			batches[n-1].last = o
			continue
		}
		batches = append(batches, stateBatch{first: o, last: o, state: state, count: r.count})
	}
	k := sp.key
	node, remote, err := sp.p.stateCoordinator(ctx, k)
	if err != nil {
		return err
	}
	if remote {
		err = sp.p.remoteWrite(ctx, node, k, sp.stateEpoch, sp.leaderEpoch, sp.start, batches)
	} else {
		err = sp.p.onState(ctx, k, func(s *states) error {
			return s.write(k, sp.stateEpoch, sp.leaderEpoch, sp.start, batches)
		})
	}
	if err == nil {
		sp.p.stats().writes.Inc()
	}
	return err
}
