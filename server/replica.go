package server

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
)

// The leader's side of replication, as Kafka's Partition does it: the
// leader tracks each follower's log end from its fetches, keeps the ISR
// through the controller (AlterPartition) — a follower that has not
// caught up for replica.lag.time.max.ms leaves it, one that has caught up
// with the high watermark joins it — and advances the high watermark to
// what every ISR member has (and, while a follower is being added, what
// it has too: Kafka's maximal ISR). acks=all waits for the high
// watermark; min.insync.replicas is checked against the ISR before and
// after the append.

type partKey struct {
	id engine.TopicID
	p  int32
}

// replication is the broker's replication state: the partitions it
// leads and the fetchers that copy the partitions it follows.
type replication struct {
	b        *Broker
	mu       sync.Mutex
	led      map[partKey]*ledPartition
	fetchers map[int32]*fetcher // by leader

	// seq stamps replica fetches in the order their reads start, so
	// that AwaitISRTruncated can tell a fetch that saw a truncation from
	// one that did not.
	seq atomic.Int64
	// mirrorQuota is mirror.replication.throttled.rate and followerQuota
	// follower.replication.throttled.rate, each shared by the fetchers
	// (replica_throttle.go).
	mirrorQuota, followerQuota replicaQuota
	// leaderQuota is leader.replication.throttled.rate, shared by the
	// fetches of the followers it throttles (fetch.go).
	leaderQuota replicaQuota
}

// ledPartition is a partition this broker leads with more than one
// replica.
type ledPartition struct {
	ep    *engine.Partition
	topic string
	key   partKey

	mu        sync.Mutex
	part      raftmeta.Partition // as of the last applied image
	followers map[int32]*follower
	altering  bool // an AlterPartition is in flight
	// electedEnd is the log end when this broker became leader in
	// part.LeaderEpoch (Kafka's leaderEpochStartOffset).
	electedEnd int64
}

// follower is what the leader knows of one follower.
type follower struct {
	logEnd       int64     // the offset it fetched from: its log end
	lastCaughtUp time.Time // the last time it had everything the leader had
	prevLeo      int64     // the leader's log end at its previous fetch
	prevFetch    time.Time
	// seq is the stamp of its latest fetch whose log matched the
	// leader's (replication.seq).
	seq int64
}

func newReplication(b *Broker) *replication {
	return &replication{b: b, led: map[partKey]*ledPartition{}, fetchers: map[int32]*fetcher{}}
}

// lead makes this broker the leader of a replicated partition, or
// updates the partition's ISR and epochs from a new image.
func (r *replication) lead(t *raftmeta.Topic, p int32, part raftmeta.Partition, ep *engine.Partition) {
	k := partKey{t.ID, p}
	r.mu.Lock()
	lp := r.led[k]
	if lp == nil || lp.ep != ep {
		lp = &ledPartition{ep: ep, topic: t.Name, key: k, followers: map[int32]*follower{}}
		r.led[k] = lp
	}
	r.mu.Unlock()
	lp.mu.Lock()
	newEpoch := lp.part.LeaderEpoch != part.LeaderEpoch || lp.part.Replicas == nil
	if newEpoch {
		lp.electedEnd = ep.Offsets().LogEnd
	}
	lp.part = part
	now := time.Now()
	for _, id := range part.Replicas {
		if id == r.b.cfg.NodeID {
			continue
		}
		f := lp.followers[id]
		if f == nil || newEpoch {
			// A new leader knows nothing of its followers yet; as in
			// Kafka, those in the ISR count as caught up now.
			f = &follower{logEnd: -1, lastCaughtUp: now}
			lp.followers[id] = f
		}
	}
	for id := range lp.followers {
		if !slices.Contains(part.Replicas, id) {
			delete(lp.followers, id)
		}
	}
	lp.mu.Unlock()
	lp.updateHWM(r.b.cfg.NodeID)
}

// unlead forgets a partition this broker no longer leads.
func (r *replication) unlead(id engine.TopicID, p int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.led, partKey{id, p})
}

func (r *replication) leading(id engine.TopicID, p int32) *ledPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.led[partKey{id, p}]
}

// updateHWM sets the high watermark to what every member of the maximal
// ISR has; with no follower in it, to the leader's durable end.
func (lp *ledPartition) updateHWM(self int32) {
	lp.mu.Lock()
	hwm := int64(math.MaxInt64)
	for _, id := range lp.part.ISR {
		if id == self {
			continue
		}
		f := lp.followers[id]
		if f == nil || f.logEnd < 0 {
			hwm = min(hwm, lp.ep.Offsets().HighWatermark) // not heard from yet: stay
			continue
		}
		hwm = min(hwm, f.logEnd)
	}
	lp.mu.Unlock()
	lp.ep.SetHighWatermark(hwm)
}

// fetched records a follower's fetch from offset, whose read (stamped
// seq) found the follower's log to match the leader's up to offset, and
// returns whether it should join the ISR.
func (lp *ledPartition) fetched(self, id int32, offset, seq int64, now time.Time) (expand bool) {
	offs := lp.ep.Offsets()
	lp.mu.Lock()
	f := lp.followers[id]
	if f == nil {
		lp.mu.Unlock()
		return false
	}
	f.logEnd = offset
	f.seq = max(f.seq, seq)
	// Kafka's rule: caught up now if it asks for the leader's end; else
	// caught up as of its previous fetch if it asks for what the leader
	// had then.
	switch {
	case offset >= offs.LogEnd:
		f.lastCaughtUp = now
	case offset >= f.prevLeo && f.prevFetch.After(f.lastCaughtUp):
		f.lastCaughtUp = f.prevFetch
	}
	f.prevLeo, f.prevFetch = offs.LogEnd, now
	inISR := slices.Contains(lp.part.ISR, id)
	expand = !inISR && !lp.altering && offset >= offs.HighWatermark && offset >= lp.epochStart()
	lp.mu.Unlock()
	if inISR {
		lp.updateHWM(self)
	}
	return expand
}

// epochStart is where the current leader epoch begins in the leader's
// log: a follower joins the ISR only once it has reached it (Kafka's
// leaderEpochStartOffset). That is the log end at the election: the
// first batch of the epoch starts there, and a mirror partition, whose
// batches keep their source's epochs, never has a batch of it (its epoch
// cache would put the start at the moving log end, and a follower could
// never catch it while the mirror copies).
func (lp *ledPartition) epochStart() int64 {
	_, end := lp.ep.EndOffsetForEpoch(lp.part.LeaderEpoch - 1)
	return max(min(end, lp.electedEnd), 0)
}

// laggards are the ISR followers that have not caught up within lag.
func (lp *ledPartition) laggards(now time.Time, lag time.Duration) []int32 {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	var out []int32
	for _, id := range lp.part.ISR {
		if f := lp.followers[id]; f != nil && now.Sub(f.lastCaughtUp) > lag {
			out = append(out, id)
		}
	}
	return out
}

// alterISR asks the controller for a new ISR, one request at a time per
// partition. The new image brings the result.
func (r *replication) alterISR(lp *ledPartition, isr []int32, why string) {
	b := r.b
	if b.session == nil {
		return
	}
	lp.mu.Lock()
	if lp.altering {
		lp.mu.Unlock()
		return
	}
	lp.altering = true
	part := lp.part
	lp.mu.Unlock()
	b.loops.Add(1)
	go func() {
		defer b.loops.Done()
		defer func() { lp.mu.Lock(); lp.altering = false; lp.mu.Unlock() }()
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		_, err := b.meta.AlterPartition(ctx, raftmeta.AlterPartitionRequest{
			Broker: b.cfg.NodeID, BrokerEpoch: b.session.Epoch(), TopicID: lp.key.id, Partition: lp.key.p,
			LeaderEpoch: part.LeaderEpoch, PartitionEpoch: part.PartitionEpoch, ISR: isr,
		})
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Warn("ISR change refused", "topic", lp.topic, "partition", lp.key.p, "isr", isr, "why", why, "err", err)
			}
			return
		}
		b.log.Info("ISR changed", "topic", lp.topic, "partition", lp.key.p, "from", part.ISR, "to", isr, "why", why)
		// Wait for the image that has it, so that the next decision
		// starts from it.
		b.awaitImage(ctx, func(img *raftmeta.Image) bool {
			t := img.TopicsByID[lp.key.id]
			return t == nil || int(lp.key.p) >= len(t.Partitions) || t.Partitions[lp.key.p].PartitionEpoch > part.PartitionEpoch
		})
	}()
}

// expand adds a caught-up follower to the ISR.
func (r *replication) expand(lp *ledPartition, id int32) {
	lp.mu.Lock()
	isr := append(slices.Clone(lp.part.ISR), id)
	lp.mu.Unlock()
	r.alterISR(lp, isr, fmt.Sprintf("follower %d caught up", id))
}

// isrLoop shrinks ISRs: every half of replica.lag.time.max.ms, followers
// that have not caught up within it leave the ISR of the partitions this
// broker leads. It also checkpoints high watermarks.
func (r *replication) isrLoop(ctx context.Context) {
	lag := r.b.props.Cluster.ReplicaLagMax
	tick := time.NewTicker(max(lag/2, 50*time.Millisecond))
	defer tick.Stop()
	checkpoint := time.NewTicker(5 * time.Second) // replica.high.watermark.checkpoint.interval.ms
	defer checkpoint.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, lp := range r.ledPartitions() {
				gone := lp.laggards(now, lag)
				if len(gone) == 0 {
					continue
				}
				lp.mu.Lock()
				isr := slices.DeleteFunc(slices.Clone(lp.part.ISR), func(id int32) bool { return slices.Contains(gone, id) })
				lp.mu.Unlock()
				r.alterISR(lp, isr, fmt.Sprintf("followers %v did not catch up within replica.lag.time.max.ms (%v)", gone, lag))
			}
		case <-checkpoint.C:
			r.checkpoint()
		}
	}
}

func (r *replication) ledPartitions() []*ledPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*ledPartition, 0, len(r.led))
	for _, lp := range r.led {
		out = append(out, lp)
	}
	return out
}

// checkpoint persists the high watermarks of replicated partitions.
func (r *replication) checkpoint() {
	for _, sp := range r.b.engine.Stored() {
		if ep := r.b.engine.Partition(sp.TopicID, sp.Partition); ep != nil {
			if err := ep.CheckpointHighWatermark(); err != nil {
				r.b.log.Debug("high watermark checkpoint", "topic", sp.Topic, "partition", sp.Partition, "err", err)
			}
		}
	}
}

// minISR is the topic's min.insync.replicas.
func (b *Broker) minISR(t *raftmeta.Topic) int {
	n, _ := strconv.Atoi(b.layers(t).Str("min.insync.replicas"))
	return max(n, 1)
}

// awaitReplicated waits until the high watermark covers last (acks=all).
// NOT_ENOUGH_REPLICAS_AFTER_APPEND if by then the ISR is smaller than
// min.insync.replicas, NOT_LEADER_OR_FOLLOWER if leadership moved,
// REQUEST_TIMED_OUT if timeout passes first.
func (b *Broker) awaitReplicated(ctx context.Context, t *raftmeta.Topic, p int32, epoch int32, ep *engine.Partition, last int64, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		hwmCh := ep.Wait()
		b.applied.mu.Lock()
		img, imgCh := b.applied.image, b.applied.changed
		b.applied.mu.Unlock()
		cur := img.TopicsByID[t.ID]
		if cur == nil || int(p) >= len(cur.Partitions) {
			return fmt.Errorf("%s-%d is gone: %w", t.Name, p, kerr.UnknownTopicOrPartition)
		}
		part := cur.Partitions[p]
		if part.Leader != b.cfg.NodeID || part.LeaderEpoch != epoch {
			return fmt.Errorf("%s-%d: leadership moved to broker %d (epoch %d) before the ISR had the records: %w",
				t.Name, p, part.Leader, part.LeaderEpoch, kerr.NotLeaderForPartition)
		}
		if ep.Offsets().HighWatermark > last {
			if n := b.minISR(cur); len(part.ISR) < n {
				return fmt.Errorf("%s-%d: the ISR %v is smaller than min.insync.replicas %d: %w", t.Name, p, part.ISR, n, kerr.NotEnoughReplicasAfterAppend)
			}
			return nil
		}
		select {
		case <-hwmCh:
		case <-imgCh:
		case <-timer.C:
			return fmt.Errorf("%s-%d: the ISR %v did not replicate offset %d within %v: %w", t.Name, p, part.ISR, last, timeout, kerr.RequestTimedOut)
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return fmt.Errorf("broker closing: %w", kerr.NotLeaderForPartition)
		}
	}
}

// replicaFetch is who sends a Fetch: a broker (id >= 0, with its broker
// epoch from Fetch v15) or a consumer (-1).
type replicaFetch struct {
	id    int32
	epoch int64
}

// checkReplica refuses a replica fetch from a broker that is not a
// replica of the partition or whose broker epoch is not its registered
// one (a client posing as a follower, KIP-903; CVE-2018-1288 asks in
// addition for CLUSTER_ACTION, checked with the request).
func (b *Broker) checkReplica(fp *fetchPart, r replicaFetch, part raftmeta.Partition) *kerr.Error {
	img := b.image()
	br, ok := img.Brokers[r.id]
	switch {
	case !slices.Contains(part.Replicas, r.id):
		return kerr.NotLeaderForPartition
	case !ok || r.epoch != br.Epoch:
		return kerr.StaleBrokerEpoch
	}
	if b.repl.leading(fp.topic.ID, fp.key.partition) == nil {
		return kerr.NotLeaderForPartition
	}
	return nil
}

// replicaFetched records the fetch of a follower whose log matched ours
// up to its fetch offset (read stamped seq), once per request. As in
// Kafka, a fetch answered with a diverging epoch or out of range is not
// recorded: a follower with a divergent suffix neither counts for the
// high watermark nor rejoins the ISR before it truncated.
func (b *Broker) replicaFetched(fp *fetchPart, r replicaFetch, seq int64) {
	if fp.replicaSeen {
		return
	}
	fp.replicaSeen = true
	lp := b.repl.leading(fp.topic.ID, fp.key.partition)
	if lp == nil {
		return
	}
	if lp.fetched(b.cfg.NodeID, r.id, fp.req.FetchOffset, seq, time.Now()) && b.image().Brokers[r.id].Live() {
		b.repl.expand(lp, r.id)
	}
}

// AwaitISRTruncated implements plugin.ReplicaConvergence: it waits until
// every follower in the ISR of a partition this broker leads has fetched,
// since the call, with a log that matches the leader's: one that had
// records the leader truncated away has truncated them (answered with a
// diverging epoch, it is not counted until a later fetch matches). A
// follower that stops fetching leaves the ISR after
// replica.lag.time.max.ms, which ends the wait too.
func (b *Broker) AwaitISRTruncated(ctx context.Context, id raftmeta.UUID, partition int32) error {
	start := b.repl.seq.Add(1)
	for {
		lp := b.repl.leading(id, partition)
		if lp == nil {
			t := b.image().TopicsByID[id]
			if t != nil && int(partition) < len(t.Partitions) {
				if part := t.Partitions[partition]; part.Leader == b.cfg.NodeID && len(part.Replicas) <= 1 {
					return nil // one replica: nothing to wait for
				}
			}
			return fmt.Errorf("partition %d of topic %s is not led by broker %d: %w", partition, id.Base64(), b.cfg.NodeID, kerr.NotLeaderForPartition)
		}
		lp.mu.Lock()
		var waiting []int32
		for _, f := range lp.part.ISR {
			if f != b.cfg.NodeID && (lp.followers[f] == nil || lp.followers[f].seq <= start) {
				waiting = append(waiting, f)
			}
		}
		lp.mu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		// Polled: the ISR changes with images and fetches, and a wait
		// lasts a fetch round or two.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s-%d: ISR followers %v have not fetched since the truncation: %w", lp.topic, partition, waiting, ctx.Err())
		case <-b.ctx.Done():
			return fmt.Errorf("broker closing: %w", kerr.NotLeaderForPartition)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
