package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
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

// ledPartition is a partition this broker leads with more than one
// replica.
type ledPartition struct {
	ep    *engine.Partition
	topic string
	key   partKey

	mu        sync.Mutex
	part      metadata.Partition // as of the last applied image
	followers map[int32]*follower
	altering  bool // an AlterPartition is in flight
	// joining are the followers an AlterPartition proposed to add to
	// the ISR, until the image says what became of it: the high
	// watermark waits for them too (Kafka's maximal ISR), since the
	// controller may commit the ISR with them, and then elect one,
	// before this leader hears of it.
	joining []int32
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
	// leader's (Manager.seq).
	seq int64
}

// lead makes this broker the leader of a replicated partition, or
// updates the partition's ISR and epochs from a new image.
func (m *Manager) lead(t *metadata.Topic, p int32, part metadata.Partition, ep *engine.Partition) {
	k := partKey{t.ID, p}
	m.mu.Lock()
	lp := m.led[k]
	if lp == nil || lp.ep != ep {
		lp = &ledPartition{ep: ep, topic: t.Name, key: k, followers: map[int32]*follower{}}
		m.led[k] = lp
	}
	m.mu.Unlock()
	lp.mu.Lock()
	newEpoch := lp.part.LeaderEpoch != part.LeaderEpoch || lp.part.Replicas == nil
	if newEpoch {
		lp.electedEnd = ep.Offsets().LogEnd
	}
	if newEpoch || lp.part.PartitionEpoch != part.PartitionEpoch {
		lp.joining = nil // the image says what became of a proposal
	}
	lp.part = part
	now := m.cfg.Now()
	for _, id := range part.Replicas {
		if id == m.cfg.NodeID {
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
	lp.updateHWM(m.cfg.NodeID)
}

// unlead forgets a partition this broker no longer leads.
func (m *Manager) unlead(id engine.TopicID, p int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.led, partKey{id, p})
}

func (m *Manager) leading(id engine.TopicID, p int32) *ledPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.led[partKey{id, p}]
}

// updateHWM sets the high watermark to what every member of the maximal
// ISR (the ISR and the followers being added to it) has; with no
// follower in it, to the leader's durable end.
func (lp *ledPartition) updateHWM(self int32) {
	lp.mu.Lock()
	hwm := int64(math.MaxInt64)
	for _, id := range slices.Concat(lp.part.ISR, lp.joining) {
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
// partition. The new image brings the result. Followers it adds count
// for the high watermark from now on (joining). An answer that may not
// be the controller's (a timeout, a lost connection, no controller) is
// asked again, as Kafka's AlterPartitionManager does, until the
// controller answers or the image moves on: the change may have been
// made.
func (m *Manager) alterISR(lp *ledPartition, isr []int32, why string) {
	if m.cfg.Session == nil {
		return
	}
	lp.mu.Lock()
	if lp.altering {
		lp.mu.Unlock()
		return
	}
	lp.altering = true
	part := lp.part
	for _, id := range isr {
		if !slices.Contains(part.ISR, id) && !slices.Contains(lp.joining, id) {
			lp.joining = append(lp.joining, id)
		}
	}
	lp.mu.Unlock()
	m.cfg.Loops.Add(1)
	go func() {
		defer m.cfg.Loops.Done()
		defer func() { lp.mu.Lock(); lp.altering = false; lp.mu.Unlock() }()
		for m.ctx.Err() == nil && !lp.changedSince(part) {
			err := m.askISR(lp, part, isr, why)
			if !unsure(err) {
				if err != nil && !staleProposal(err) {
					lp.dropJoining(part) // refused: the ISR stays as the image has it
				}
				return
			}
			select {
			case <-m.ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

// askISR sends one AlterPartition and, once it is made, waits for the
// image that has it, so that the next decision starts from it.
func (m *Manager) askISR(lp *ledPartition, part metadata.Partition, isr []int32, why string) error {
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	_, err := m.cfg.Controller.AlterPartition(ctx, raftmeta.AlterPartitionRequest{
		Broker: m.cfg.NodeID, BrokerEpoch: m.cfg.Session.Epoch(), TopicID: lp.key.id, Partition: lp.key.p,
		LeaderEpoch: part.LeaderEpoch, PartitionEpoch: part.PartitionEpoch, ISR: isr,
	})
	if err != nil {
		if m.ctx.Err() == nil {
			m.cfg.Log.Warn("ISR change refused", "topic", lp.topic, "partition", lp.key.p, "isr", isr, "why", why, "err", err)
		}
		return err
	}
	m.cfg.Log.Info("ISR changed", "topic", lp.topic, "partition", lp.key.p, "from", part.ISR, "to", isr, "why", why)
	m.awaitImage(ctx, func(img *metadata.Image) bool {
		t := img.TopicsByID[lp.key.id]
		return t == nil || int(lp.key.p) >= len(t.Partitions) || t.Partitions[lp.key.p].PartitionEpoch > part.PartitionEpoch
	})
	return nil
}

// unsure reports whether an AlterPartition's error leaves open whether
// the controller made the change: no answer from it (a timeout, a lost
// connection, no active controller) or its own REQUEST_TIMED_OUT (the
// change proposed to the quorum, not yet committed).
func unsure(err error) bool {
	var ke *kerr.Error
	return err != nil && (!errors.As(err, &ke) || ke == kerr.RequestTimedOut || ke == kerr.NotController)
}

// staleProposal reports whether the controller refused a proposal made
// from a partition state that has changed since (another ISR, another
// leader): the image that says what it is now is on its way, and clears
// the followers joining.
func staleProposal(err error) bool {
	return errors.Is(err, kerr.InvalidUpdateVersion) || errors.Is(err, kerr.FencedLeaderEpoch) || errors.Is(err, kerr.NotLeaderForPartition)
}

// changedSince reports whether the applied image has moved the
// partition on from part.
func (lp *ledPartition) changedSince(part metadata.Partition) bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.part.LeaderEpoch != part.LeaderEpoch || lp.part.PartitionEpoch != part.PartitionEpoch
}

// dropJoining forgets the followers proposed from part, unless the image
// has moved on meanwhile (lead cleared them then).
func (lp *ledPartition) dropJoining(part metadata.Partition) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.part.LeaderEpoch == part.LeaderEpoch && lp.part.PartitionEpoch == part.PartitionEpoch {
		lp.joining = nil
	}
}

// awaitImage returns once the applied image is one for which ready is
// true, or when ctx ends or the broker closes first.
func (m *Manager) awaitImage(ctx context.Context, ready func(*metadata.Image) bool) {
	for {
		img, ch := m.cfg.Images.Applied()
		if ready(img) {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-m.ctx.Done():
			return
		}
	}
}

// expand adds a caught-up follower to the ISR.
func (m *Manager) expand(lp *ledPartition, id int32) {
	lp.mu.Lock()
	isr := append(slices.Clone(lp.part.ISR), id)
	lp.mu.Unlock()
	m.alterISR(lp, isr, fmt.Sprintf("follower %d caught up", id))
}

// ISRLoop shrinks ISRs until ctx ends: every half of
// replica.lag.time.max.ms (shrinkISRs). It also checkpoints high
// watermarks.
func (m *Manager) ISRLoop(ctx context.Context) {
	tick := time.NewTicker(max(m.cfg.ReplicaLagMax/2, 50*time.Millisecond))
	defer tick.Stop()
	checkpoint := time.NewTicker(5 * time.Second) // replica.high.watermark.checkpoint.interval.ms
	defer checkpoint.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.shrinkISRs()
		case <-checkpoint.C:
			Checkpoint(m.cfg.Engine, m.cfg.Log)
		}
	}
}

// shrinkISRs asks the controller to take the followers that have not
// caught up within replica.lag.time.max.ms, as of the clock's now, out of
// the ISR of the partitions this broker leads.
func (m *Manager) shrinkISRs() {
	lag, now := m.cfg.ReplicaLagMax, m.cfg.Now()
	for _, lp := range m.ledPartitions() {
		gone := lp.laggards(now, lag)
		if len(gone) == 0 {
			continue
		}
		lp.mu.Lock()
		isr := slices.DeleteFunc(slices.Clone(lp.part.ISR), func(id int32) bool { return slices.Contains(gone, id) })
		lp.mu.Unlock()
		m.alterISR(lp, isr, fmt.Sprintf("followers %v did not catch up within replica.lag.time.max.ms (%v)", gone, lag))
	}
}

func (m *Manager) ledPartitions() []*ledPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*ledPartition, 0, len(m.led))
	for _, lp := range m.led {
		out = append(out, lp)
	}
	return out
}

// Checkpoint persists the high watermarks of the partitions in e: every
// few seconds while the broker replicates (ISRLoop), and once more when
// it closes.
func Checkpoint(e *engine.Engine, log *slog.Logger) {
	for _, sp := range e.Stored() {
		if ep := e.Partition(sp.TopicID, sp.Partition); ep != nil {
			if err := ep.CheckpointHighWatermark(); err != nil {
				log.Debug("high watermark checkpoint", "topic", sp.Topic, "partition", sp.Partition, "err", err)
			}
		}
	}
}

// minISR is the topic's min.insync.replicas.
func (m *Manager) minISR(t *metadata.Topic) int {
	n, _ := strconv.Atoi(m.cfg.Layers(m.cfg.Controller.Image(), t).Str("min.insync.replicas"))
	return max(n, 1)
}

// CheckMinISR is the check of an acks=all append before it is made, the
// produce handler's and plugin.Host.CheckWritable's: the partition's ISR
// has min.insync.replicas members (NOT_ENOUGH_REPLICAS).
func (m *Manager) CheckMinISR(t *metadata.Topic, p int32, part metadata.Partition) error {
	if n := m.minISR(t); len(part.ISR) < n {
		return fmt.Errorf("the ISR %v of %s-%d is smaller than min.insync.replicas %d: %w", part.ISR, t.Name, p, n, kerr.NotEnoughReplicas)
	}
	return nil
}

// AwaitReplicated waits until the high watermark covers last (acks=all).
// NOT_ENOUGH_REPLICAS_AFTER_APPEND if by then the ISR is smaller than
// min.insync.replicas, NOT_LEADER_OR_FOLLOWER if leadership moved,
// REQUEST_TIMED_OUT if timeout passes first.
func (m *Manager) AwaitReplicated(ctx context.Context, t *metadata.Topic, p int32, epoch int32, ep *engine.Partition, last int64, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		hwmCh := ep.Wait()
		img, imgCh := m.cfg.Images.Applied()
		cur := img.TopicsByID[t.ID]
		if cur == nil || int(p) >= len(cur.Partitions) {
			return fmt.Errorf("%s-%d is gone: %w", t.Name, p, kerr.UnknownTopicOrPartition)
		}
		part := cur.Partitions[p]
		if part.Leader != m.cfg.NodeID || part.LeaderEpoch != epoch {
			return fmt.Errorf("%s-%d: leadership moved to broker %d (epoch %d) before the ISR had the records: %w",
				t.Name, p, part.Leader, part.LeaderEpoch, kerr.NotLeaderForPartition)
		}
		if ep.Offsets().HighWatermark > last {
			if n := m.minISR(cur); len(part.ISR) < n {
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
		case <-m.ctx.Done():
			return fmt.Errorf("broker closing: %w", kerr.NotLeaderForPartition)
		}
	}
}

// StampFetch stamps a replica fetch whose read is about to start: the
// read sees every truncation that happened before the stamp
// (AwaitISRTruncated).
func (m *Manager) StampFetch() int64 { return m.seq.Add(1) }

// CheckReplica refuses a replica fetch of partition p of topic id from
// a broker (follower, with its broker epoch from Fetch v15) that is not a
// replica of the partition or whose broker epoch is not its registered
// one (a client posing as a follower, KIP-903; CVE-2018-1288 asks in
// addition for CLUSTER_ACTION, checked with the request), or of a
// partition this broker does not lead with followers.
func (m *Manager) CheckReplica(id engine.TopicID, p, follower int32, brokerEpoch int64, part metadata.Partition) *kerr.Error {
	img := m.image()
	br, ok := img.Brokers[follower]
	switch {
	case !slices.Contains(part.Replicas, follower):
		return kerr.NotLeaderForPartition
	case !ok || brokerEpoch != br.Epoch:
		return kerr.StaleBrokerEpoch
	}
	if m.leading(id, p) == nil {
		return kerr.NotLeaderForPartition
	}
	return nil
}

// Fetched records the fetch of partition p of topic id by follower, from
// offset, whose read (stamped seq) found the follower's log to match ours
// up to offset; the Fetch handler calls it once per request. As in Kafka,
// a fetch answered with a diverging epoch or out of range is not
// recorded: a follower with a divergent suffix neither counts for the
// high watermark nor rejoins the ISR before it truncated.
func (m *Manager) Fetched(id engine.TopicID, p, follower int32, offset, seq int64) {
	lp := m.leading(id, p)
	if lp == nil {
		return
	}
	if lp.fetched(m.cfg.NodeID, follower, offset, seq, m.cfg.Now()) && m.image().Brokers[follower].Live() {
		m.expand(lp, follower)
	}
}

// AwaitISRTruncated is plugin.ReplicaConvergence's: it waits until
// every follower in the ISR of a partition this broker leads has fetched,
// since the call, with a log that matches the leader's: one that had
// records the leader truncated away has truncated them (answered with a
// diverging epoch, it is not counted until a later fetch matches). A
// follower that stops fetching leaves the ISR after
// replica.lag.time.max.ms, which ends the wait too.
func (m *Manager) AwaitISRTruncated(ctx context.Context, id metadata.UUID, partition int32) error {
	start := m.seq.Add(1)
	for {
		lp := m.leading(id, partition)
		if lp == nil {
			t := m.image().TopicsByID[id]
			if t != nil && int(partition) < len(t.Partitions) {
				if part := t.Partitions[partition]; part.Leader == m.cfg.NodeID && len(part.Replicas) <= 1 {
					return nil // one replica: nothing to wait for
				}
			}
			return fmt.Errorf("partition %d of topic %s is not led by broker %d: %w", partition, id.Base64(), m.cfg.NodeID, kerr.NotLeaderForPartition)
		}
		lp.mu.Lock()
		var waiting []int32
		for _, f := range lp.part.ISR {
			if f != m.cfg.NodeID && (lp.followers[f] == nil || lp.followers[f].seq <= start) {
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
		case <-m.ctx.Done():
			return fmt.Errorf("broker closing: %w", kerr.NotLeaderForPartition)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
