package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// The follower's side of replication, as Kafka's ReplicaFetcherThread
// does it: one fetcher per leader broker copies every partition this
// broker follows there. When it starts following a partition (a new
// leader or leader epoch) it first asks the leader, with
// OffsetForLeaderEpoch, where its last epoch ends, and truncates what the
// leader does not have (KIP-101, KIP-279); then it fetches with Fetch v15+
// (ReplicaState: its node ID and broker epoch; LastFetchedEpoch, so that
// the leader answers a divergence found later with DivergingEpoch),
// appends what it gets at the leader's offsets, waits for it to be
// durable before asking for more (the offset it asks for is what the
// leader counts as replicated), and takes the leader's high watermark.

// followed is a partition this broker follows.
type followed struct {
	topic       string
	key         partKey
	ep          *engine.Partition
	leaderEpoch int32
	truncated   bool // OffsetForLeaderEpoch done for leaderEpoch
	// mirrorEpoch is the latest epoch in the leader's log as this
	// follower of a mirror partition knows it: its MirrorLeaderEpoch
	// (see mirror_epoch.go), -1 until it fetches the partition as one.
	mirrorEpoch int32
}

// fetcher copies partitions from one leader.
type fetcher struct {
	m      *Manager
	leader int32
	addr   string
	mu     sync.Mutex
	parts  map[partKey]*followed
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// follow makes this broker follow partition p of t, led by leader.
func (m *Manager) follow(t *metadata.Topic, p int32, part metadata.Partition, ep *engine.Partition, img *metadata.Image) {
	k := partKey{t.ID, p}
	br, ok := img.Brokers[part.Leader]
	if !ok {
		m.unfollow(k)
		return
	}
	addr := net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port)))
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, f := range m.fetchers {
		if id != part.Leader || f.addr != addr {
			f.remove(k)
		}
	}
	f := m.fetchers[part.Leader]
	if f != nil && f.addr != addr { // the leader restarted elsewhere
		f.stop()
		f = nil
	}
	if f == nil {
		f = m.newFetcher(part.Leader, addr)
		m.fetchers[part.Leader] = f
	}
	f.add(&followed{topic: t.Name, key: k, ep: ep, leaderEpoch: part.LeaderEpoch, mirrorEpoch: -1})
}

// unfollow stops fetching a partition.
func (m *Manager) unfollow(k partKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.fetchers {
		f.remove(k)
	}
}

// stop stops every fetcher.
func (m *Manager) stop() {
	m.mu.Lock()
	fs := m.fetchers
	m.fetchers = map[int32]*fetcher{}
	m.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
}

func (m *Manager) newFetcher(leader int32, addr string) *fetcher {
	ctx, cancel := context.WithCancel(m.ctx)
	f := &fetcher{m: m, leader: leader, addr: addr, parts: map[partKey]*followed{},
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	m.cfg.Loops.Add(1)
	go func() {
		defer m.cfg.Loops.Done()
		defer close(f.done)
		f.run(ctx)
	}()
	return f
}

func (f *fetcher) add(fp *followed) {
	f.mu.Lock()
	if cur := f.parts[fp.key]; cur != nil && cur.ep == fp.ep && cur.leaderEpoch == fp.leaderEpoch {
		f.mu.Unlock()
		return
	}
	f.parts[fp.key] = fp
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fetcher) remove(k partKey) {
	f.mu.Lock()
	delete(f.parts, k)
	f.mu.Unlock()
}

func (f *fetcher) stop() {
	f.cancel()
	<-f.done
}

func (f *fetcher) snapshot() []*followed {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*followed, 0, len(f.parts))
	for _, fp := range f.parts {
		out = append(out, fp)
	}
	return out
}

// current reports whether fp is still what this fetcher follows.
func (f *fetcher) current(fp *followed) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[fp.key] == fp
}

func (f *fetcher) run(ctx context.Context) {
	m := f.m
	cl, err := m.cfg.Peers.Client(f.addr)
	if err != nil {
		m.cfg.Log.Error("replica fetcher: client", "leader", f.leader, "err", err)
		return
	}
	defer cl.Close()
	conn := cl.SeedBrokers()[0]
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		// A partition to follow anew (a new leader or epoch: add wakes
		// the fetcher) ends the backoff: the failures it grew from were
		// for what the fetcher followed before, often a leader that
		// died and now came back on the same address to lead again.
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			case <-f.wake:
				backoff = 0
			}
		}
		parts := f.snapshot()
		if len(parts) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-f.wake:
				backoff = 0
			}
			continue
		}
		refused, err := f.truncate(ctx, conn, parts)
		if err == nil {
			err = f.fetch(ctx, conn, parts)
		}
		if err == nil && refused != nil {
			// The other partitions were fetched; those the leader
			// refused are retried soon, not in a hot loop.
			backoff = min(f.failed(refused, backoff), 500*time.Millisecond)
			continue
		}
		if err != nil {
			backoff = f.failed(err, backoff)
			continue
		}
		m.cfg.Peers.OK(f.leader)
		backoff = 0
	}
}

// failed logs a failed exchange with the leader (once per kind, not at
// every retry) and returns the next backoff.
func (f *fetcher) failed(err error, backoff time.Duration) time.Duration {
	if f.m.ctx.Err() == nil {
		f.m.cfg.Peers.Failed(f.leader, f.addr, err)
	}
	if f.m.cfg.Peers.AuthFailure(err) {
		// Refused credentials stay refused until an operator acts.
		return min(max(backoff*2, time.Second), 10*time.Second)
	}
	return min(max(backoff*2, 50*time.Millisecond), time.Second)
}

// truncate runs OffsetForLeaderEpoch for the partitions that have not
// done it under their current leader epoch, and truncates them. refused
// is the first partition the leader answered with an error (it is
// retried); err is an exchange that failed.
func (f *fetcher) truncate(ctx context.Context, conn *kgo.Broker, parts []*followed) (refused, err error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = f.m.cfg.NodeID
	var todo []*followed
	byTopic := map[string]int{}
	for _, fp := range parts {
		if fp.truncated {
			continue
		}
		last := fp.ep.LastFetchedEpoch()
		if last < 0 {
			fp.truncated = true // nothing to truncate
			continue
		}
		i, ok := byTopic[fp.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[fp.topic] = i
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = fp.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = fp.key.p, fp.leaderEpoch, last
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		todo = append(todo, fp)
	}
	if len(todo) == 0 {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, conn)
	if err != nil {
		return nil, fmt.Errorf("OffsetForLeaderEpoch to broker %d: %w", f.leader, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			for _, fp := range todo {
				if fp.topic != rt.Topic || fp.key.p != rp.Partition || !f.current(fp) {
					continue
				}
				if rp.ErrorCode != 0 {
					if refused == nil {
						refused = fmt.Errorf("OffsetForLeaderEpoch %s-%d to broker %d: %w", fp.topic, fp.key.p, f.leader, kerr.ErrorForCode(rp.ErrorCode))
					}
					continue
				}
				if err := f.truncateTo(fp, rp.LeaderEpoch, rp.EndOffset); err != nil {
					return refused, err
				}
				fp.truncated = true
			}
		}
	}
	return refused, nil
}

// truncateTo truncates fp's log where it diverges from the leader's,
// which says its epoch ends at end (KIP-279): at end, or where the
// follower's own log of that epoch ends if that is lower. An undefined
// epoch (-1) means the leader has nothing of ours: truncate to our high
// watermark.
func (f *fetcher) truncateTo(fp *followed, epoch int32, end int64) error {
	offs := fp.ep.Offsets()
	at := offs.HighWatermark
	if epoch >= 0 {
		myEpoch, myEnd := fp.ep.EndOffsetForEpoch(epoch)
		at = end
		if myEpoch == epoch || myEnd >= 0 {
			at = min(end, myEnd)
		}
	}
	if at >= offs.LogEnd {
		return nil
	}
	f.m.cfg.Log.Info("truncating a follower's log to its leader's", "topic", fp.topic, "partition", fp.key.p,
		"leader", f.leader, "from", offs.LogEnd, "to", at, "leader_epoch", epoch)
	if err := fp.ep.Truncate(at); err != nil {
		return fmt.Errorf("truncate %s-%d to %d: %w", fp.topic, fp.key.p, at, err)
	}
	return nil
}

// fetch sends one Fetch and appends what it brings.
func (f *fetcher) fetch(ctx context.Context, conn *kgo.Broker, parts []*followed) error {
	cp := &f.m.cfg
	fr := f.request(parts)
	if len(fr.fetching) == 0 {
		if fr.quotaWait > 0 { // only throttled partitions, over their quota
			select {
			case <-ctx.Done():
			case <-time.After(min(fr.quotaWait, time.Second)):
			}
		}
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, cp.FetchWait+30*time.Second)
	defer cancel()
	resp, err := fr.req.RequestWith(rctx, conn)
	if err != nil {
		return fmt.Errorf("Fetch from broker %d: %w", f.leader, err)
	}
	if resp.ErrorCode != 0 {
		return fmt.Errorf("Fetch from broker %d: %w", f.leader, kerr.ErrorForCode(resp.ErrorCode))
	}
	return f.apply(ctx, resp, fr)
}

// followerFetch is a follower's Fetch request and what its answer is
// checked and applied against.
type followerFetch struct {
	req      *kmsg.FetchRequest
	fetching map[partKey]*followed
	bounds   map[partKey]int32 // KAFKA-18723: the highest batch epoch each partition may take
	// throttled are the partitions under a follower throttle.
	throttled map[partKey]throttle
	quotaWait time.Duration // > 0: a throttled partition was left out
}

// request builds the Fetch of the partitions of parts that are truncated
// to the leader's log and not over their throttle's quota, each from its
// log end offset.
func (f *fetcher) request(parts []*followed) *followerFetch {
	m := f.m
	cp := &m.cfg
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = m.cfg.NodeID
	req.ReplicaState.ID, req.ReplicaState.Epoch = m.cfg.NodeID, m.cfg.Session.Epoch()
	req.MaxWaitMillis = int32(cp.FetchWait.Milliseconds())
	req.MinBytes = 1
	req.MaxBytes = cp.FetchResponseBytes
	req.SessionEpoch = -1
	fr := &followerFetch{req: req, fetching: map[partKey]*followed{}, bounds: map[partKey]int32{}, throttled: map[partKey]throttle{}}
	byID := map[[16]byte]int{}
	img := m.image()
	rates := m.followerThrottleRates()
	for _, fp := range parts {
		if !fp.truncated {
			continue
		}
		if th, ok := m.followerThrottle(img, fp, rates); ok {
			if w := th.q.Wait(th.rate, m.cfg.Now()); w > 0 {
				fr.quotaWait = max(fr.quotaWait, w)
				continue
			}
			fr.throttled[fp.key] = th
		}
		i, ok := byID[fp.key.id]
		if !ok {
			i = len(req.Topics)
			byID[fp.key.id] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = fp.topic, fp.key.id
			req.Topics = append(req.Topics, rt)
		}
		offs := fp.ep.Offsets()
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch = fp.key.p, fp.leaderEpoch
		rp.FetchOffset, rp.LogStartOffset = offs.LogEnd, offs.LogStart
		rp.LastFetchedEpoch = fp.ep.LastFetchedEpoch()
		rp.PartitionMaxBytes = cp.FetchMaxBytes
		if th, ok := fr.throttled[fp.key]; ok {
			rp.PartitionMaxBytes = int32(min(int64(cp.FetchMaxBytes), th.rate)) // a second's worth
		}
		fr.bounds[fp.key] = fp.leaderEpoch
		if img.MirrorOf(fp.topic) != "" {
			if fp.mirrorEpoch < 0 {
				// The leader's log continues ours, whose latest epoch
				// is the least it can have.
				fp.mirrorEpoch = max(rp.LastFetchedEpoch, 0)
			}
			SetMirrorLeaderEpoch(&rp.UnknownTags, fp.mirrorEpoch)
			fr.bounds[fp.key] = fp.mirrorEpoch
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		fr.fetching[fp.key] = fp
	}
	return fr
}

// apply applies the partitions of a Fetch's answer that are still
// followed, and returns the first error of any.
//
// The partitions are applied together: each append waits for its
// segment file's sync, and one after the other a response of n
// partitions cost n syncs in a row before the next fetch could tell
// the leader (and so acks=all) how far this replica got.
func (f *fetcher) apply(ctx context.Context, resp *kmsg.FetchResponse, fr *followerFetch) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for _, rt := range resp.Topics {
		for i := range rt.Partitions {
			rp := &rt.Partitions[i]
			fp := fr.fetching[partKey{rt.TopicID, rp.Partition}]
			if fp == nil || !f.current(fp) {
				continue
			}
			if th, ok := fr.throttled[fp.key]; ok {
				th.q.Record(len(rp.RecordBatches), th.rate, f.m.cfg.Now())
				th.bytes.Add(len(rp.RecordBatches))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.handle(ctx, fp, rp, fr.bounds[fp.key]); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return firstErr
}

// handle applies one partition of a fetch response, whose batches may
// carry epochs up to bound.
func (f *fetcher) handle(ctx context.Context, fp *followed, rp *kmsg.FetchResponseTopicPartition, bound int32) error {
	switch err := kerr.ErrorForCode(rp.ErrorCode); {
	case err == nil:
	case errors.Is(err, kerr.OffsetOutOfRange):
		offs := fp.ep.Offsets()
		if offs.LogEnd < rp.LogStartOffset {
			// Retention or DeleteRecords removed what we would fetch
			// next while we were away: as Kafka's follower does, drop
			// the whole log and fetch from the leader's log start.
			f.m.cfg.Log.Info("replica fetch: the log ends below the leader's log start; starting over there", "topic", fp.topic,
				"partition", fp.key.p, "leader", f.leader, "log_end", offs.LogEnd, "leader_log_start", rp.LogStartOffset)
			if err := fp.ep.StartOver(rp.LogStartOffset); err != nil {
				return fmt.Errorf("%s-%d: start the log over at the leader's log start %d: %w", fp.topic, fp.key.p, rp.LogStartOffset, err)
			}
			return nil
		}
		fp.truncated = false // our end is past the leader's: find where we diverge
		return nil
	default:
		// NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH,
		// STALE_BROKER_EPOCH: one of us has not applied the latest
		// metadata yet; the next image moves the partition.
		return fmt.Errorf("%s-%d: %w", fp.topic, fp.key.p, err)
	}
	if rp.DivergingEpoch.Epoch >= 0 || rp.DivergingEpoch.EndOffset >= 0 {
		return f.truncateTo(fp, rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset)
	}
	recs := rp.RecordBatches
	n, above, err := engine.EpochPrefix(recs, bound)
	if err != nil {
		return fmt.Errorf("%s-%d: replicated batches: %w", fp.topic, fp.key.p, err)
	}
	if above >= 0 {
		recs = recs[:n]
	}
	if mle := MirrorLeaderEpoch(&rp.UnknownTags); mle > fp.mirrorEpoch && fp.mirrorEpoch >= 0 {
		fp.mirrorEpoch = mle // the bound of the next fetch
	}
	if above >= 0 {
		// Kafka appends the batches up to the bound and fetches the
		// rest again (KAFKA-18723); so does Tandem. On a mirror
		// partition a new source epoch arrives this way once; on
		// another partition it means a read that raced the leader's
		// truncation.
		lvl := slog.LevelWarn
		if fp.mirrorEpoch >= 0 {
			lvl = slog.LevelDebug
		}
		f.m.cfg.Log.Log(ctx, lvl, "replica fetch: batches above the leader epoch bound refused", "topic", fp.topic, "partition", fp.key.p,
			"leader", f.leader, "bound", bound, "batch_epoch", above, "batch_offset", int64(binary.BigEndian.Uint64(rp.RecordBatches[n:])))
	}
	if len(recs) > 0 {
		_, err := fp.ep.Append(ctx, &engine.AppendRequest{
			Topic: fp.topic, TopicID: fp.key.id, Partition: fp.key.p,
			Origin: engine.OriginReplica, Records: recs, Acks: -1,
		})
		if err != nil {
			return fmt.Errorf("%s-%d: append replicated batches: %w", fp.topic, fp.key.p, err)
		}
	}
	fp.ep.SetHighWatermark(rp.HighWatermark)
	if offs := fp.ep.Offsets(); rp.LogStartOffset > offs.LogStart && rp.LogStartOffset <= offs.HighWatermark {
		if _, err := fp.ep.DeleteRecords(rp.LogStartOffset); err != nil {
			f.m.cfg.Log.Debug("follower log start", "topic", fp.topic, "partition", fp.key.p, "err", err)
		}
	}
	return nil
}
