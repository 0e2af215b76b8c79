// Package txn is Tandem's transaction coordinator: transactional
// producers (InitProducerId with a transactional id, AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn), the markers that end transactions in every
// partition they touched (WriteTxnMarkers), the abort of transactions
// that outlive their timeout, and DescribeTransactions/ListTransactions.
// State lives in the compacted internal topic __transaction_state, in
// Kafka's record formats, on the partitioned coordinator runtime of
// engine/coord.
package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Topic is the internal topic holding transaction state.
const Topic = "__transaction_state"

// maxEpoch is the last producer epoch handed out for a producer id; the
// next bump moves the transactional id to a new producer id (Kafka keeps
// Short.MaxValue for itself).
const maxEpoch = 32766

// Config is the plugin's part of the broker properties.
type Config struct {
	Partitions        int32         // transaction.state.log.num.partitions (50)
	ReplicationFactor int16         // transaction.state.log.replication.factor (3, capped at the live brokers)
	MinISR            int           // transaction.state.log.min.isr (2, capped at the replication factor)
	SegmentBytes      int64         // transaction.state.log.segment.bytes (104857600)
	MaxTimeout        time.Duration // transaction.max.timeout.ms (900000)
	AbortInterval     time.Duration // transaction.abort.timed.out.transaction.cleanup.interval.ms (10000)
}

// ParseConfig reads the plugin's keys from broker properties, with Kafka's
// defaults.
func ParseConfig(props map[string]string) (Config, error) {
	r := plugin.ReadProps(props)
	ms := func(key string, def int64) time.Duration {
		return time.Duration(r.Int(key, def, 1, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	}
	c := Config{
		Partitions:        int32(r.Int("transaction.state.log.num.partitions", 50, 1, math.MaxInt32)),
		ReplicationFactor: int16(r.Int("transaction.state.log.replication.factor", 3, 1, math.MaxInt16)),
		MinISR:            int(r.Int("transaction.state.log.min.isr", 2, 1, math.MaxInt16)),
		SegmentBytes:      r.Int("transaction.state.log.segment.bytes", 104857600, 1, math.MaxInt32),
		MaxTimeout:        ms("transaction.max.timeout.ms", 900000),
		AbortInterval:     ms("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000),
	}
	return c, r.Err()
}

// Plugin is the transaction coordinator: a plugin.APIHandler,
// plugin.TxnCoordinator and plugin.TxnPartitionAdder, and through its
// plugin.Coordinator a plugin.Lifecycle, plugin.LeaderObserver and
// plugin.CoordinatorLocator.
type Plugin struct {
	*plugin.Coordinator
	cfg Config
	log *slog.Logger
	now func() time.Time

	pids   metadata.ProducerIDs
	mu     sync.Mutex      // guards stop against wg.Add
	ctx    context.Context // canceled by Stop: background completions end
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var (
	_ plugin.APIHandler         = (*Plugin)(nil)
	_ plugin.CoordinatorLocator = (*Plugin)(nil)
	_ plugin.LeaderObserver     = (*Plugin)(nil)
	_ plugin.Lifecycle          = (*Plugin)(nil)
	_ plugin.TxnCoordinator     = (*Plugin)(nil)
	_ plugin.TxnPartitionAdder  = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties. An invalid
// property makes Start fail.
func New(props map[string]string, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, log: log.With("plugin", "txn"), now: time.Now}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.Coordinator = plugin.NewCoordinator(plugin.CoordinatorConfig{
		KeyType: plugin.CoordinatorTransaction,
		Topic: plugin.InternalTopic{Name: Topic, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor,
			Configs: map[string]string{"compression.type": "uncompressed", "segment.bytes": strconv.FormatInt(cfg.SegmentBytes, 10),
				"min.insync.replicas": strconv.Itoa(cfg.MinISR)}},
		New:    func(int32) coord.StateMachine { return &shardState{p: p, txns: map[string]*txnMeta{}} },
		Logger: p.log,
		Err:    err,
	})
	return p
}

// Stop implements plugin.Lifecycle: background completions end first
// (their transactions complete on the next leader of their partition),
// then the shards unload.
func (p *Plugin) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	p.wg.Wait()
	return p.Coordinator.Stop(ctx)
}

// APIs implements plugin.APIHandler. EndTxn v5 is KIP-890 part 2
// (transaction.version 2, which the broker finalizes because the plugin
// is a plugin.TxnPartitionAdder): the epoch is bumped at every end.
func (p *Plugin) APIs() []plugin.API {
	return []plugin.API{
		plugin.Answer(kmsg.AddPartitionsToTxn, 0, 5, p.handleAddPartitions),
		plugin.Answer(kmsg.AddOffsetsToTxn, 0, 4, p.handleAddOffsets),
		plugin.Answer(kmsg.EndTxn, 0, 5, p.handleEndTxn), // v5: epoch bump
		plugin.Answer(kmsg.WriteTxnMarkers, 0, 1, p.handleWriteTxnMarkers),
		plugin.Answer(kmsg.DescribeTransactions, 0, 0, p.handleDescribe),
		plugin.Answer(kmsg.ListTransactions, 0, 2, p.handleList),
	}
}

// do runs fn on the transactional id's shard. Errors carry Kafka codes.
func (p *Plugin) do(ctx context.Context, txnID string, fn func(s *shardState) error) error {
	return p.Do(ctx, txnID, func(sh *coord.Shard) error {
		return fn(sh.State().(*shardState))
	})
}

// fenced is the error for a stale producer epoch: PRODUCER_FENCED for
// requests of a version that knows it (KIP-588), INVALID_PRODUCER_EPOCH
// before.
func fenced(version, since int16) *kerr.Error {
	if version >= since {
		return kerr.ProducerFenced
	}
	return kerr.InvalidProducerEpoch
}

// producerID allocates a producer id for a transactional id.
func (p *Plugin) producerID(ctx context.Context) (int64, error) {
	host := p.Host()
	if host == nil {
		return -1, kerr.CoordinatorNotAvailable
	}
	id, err := p.pids.Next(ctx, host.Metadata())
	if err != nil {
		return -1, fmt.Errorf("%w: %w", err, kerr.CoordinatorNotAvailable)
	}
	return id, nil
}

// completeLater writes an ending transaction's markers and final state in
// the background, after delay.
func (p *Plugin) completeLater(e ending, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return // stopping: the next coordinator completes it
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-p.ctx.Done():
				return
			}
		}
		p.Contain(func() { p.complete(p.ctx, e) })
	}()
}

// complete writes the markers of an ending transaction to every partition
// it touched, then its CompleteCommit or CompleteAbort state. A failure
// leaves it in its Prepare state and retries later the partitions whose
// marker is missing: the outcome is already decided and the markers are
// idempotent for consumers.
func (p *Plugin) complete(ctx context.Context, e ending) error {
	// Only while this broker coordinates the transaction, still being
	// ended: a new coordinator completes it from its log (Loaded), and
	// a retry must not outlive our leadership.
	pending := false
	if err := p.do(ctx, e.id, func(s *shardState) error {
		pending = s.txns[e.id].ending(e)
		return nil
	}); err != nil || !pending {
		p.retryUnavailable(e, err)
		return err
	}
	if failed, err := p.writeMarkers(ctx, e); err != nil {
		if p.ctx.Err() == nil {
			// Once at warning level, then every 10 s: a partition may
			// refuse markers for long (min.insync.replicas not met).
			level := slog.LevelDebug
			if e.attempts%20 == 0 {
				level = slog.LevelWarn
			}
			p.log.Log(ctx, level, "writing transaction markers; retrying", "transactional_id", e.id, "attempts", e.attempts+1, "err", err)
			e.parts = failed
			e.attempts++
			p.completeLater(e, markerRetry)
		}
		return err
	}
	err := p.do(ctx, e.id, func(s *shardState) error {
		m := s.txns[e.id]
		if !m.ending(e) {
			return nil // completed already
		}
		n := m.clone()
		n.state, n.parts, n.startMs = stCompleteAbort, map[plugin.TopicPartition]bool{}, -1
		if e.commit {
			n.state = stCompleteCommt
		}
		if n.nextPid >= 0 {
			// The epoch bump exhausted the epochs: the producer goes on
			// with the new producer id (transaction.version 2).
			n.pid, n.epoch, n.nextPid = n.nextPid, 0, -1
		}
		return s.put(n)
	})
	p.retryUnavailable(e, err)
	return err
}

// retryUnavailable completes e later when err says that this broker's
// shard could not serve for a while (COORDINATOR_NOT_AVAILABLE: its
// session with the controller lapsed, or a write was not replicated in
// time; COORDINATOR_LOAD_IN_PROGRESS) rather than that another broker
// coordinates it now (NOT_COORDINATOR, whose Loaded completes it). A
// transaction left in PrepareCommit or PrepareAbort here would answer
// CONCURRENT_TRANSACTIONS to its producer until leadership moved: issue
// 44's partition runs hung a transactional producer so for minutes.
func (p *Plugin) retryUnavailable(e ending, err error) {
	if errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) {
		e.attempts++
		p.completeLater(e, markerRetry)
	}
}

// markerRetry is the pause before markers that could not be written are
// sent again; markerTimeout bounds one attempt to one broker, so that a
// broker that died holds nothing up for long (its partitions get a new
// leader, which the next attempt finds in the image).
const (
	markerRetry   = 500 * time.Millisecond
	markerTimeout = 10 * time.Second
)

// writeMarkers writes the markers of e to its partitions: those led here
// directly, those led by other brokers with one WriteTxnMarkers request
// per broker (Kafka's TransactionMarkerChannelManager). It returns the
// partitions whose marker is not written.
func (p *Plugin) writeMarkers(ctx context.Context, e ending) ([]plugin.TopicPartition, error) {
	h := p.Host()
	m := engine.Marker{ProducerID: e.pid, ProducerEpoch: e.epoch, CoordinatorEpoch: e.coordEpoch, Commit: e.commit}
	img := h.Metadata().Image()
	var local []plugin.TopicPartition
	remote := map[int32][]plugin.TopicPartition{}
	var failed []plugin.TopicPartition
	var errs []error
	for _, tp := range e.parts {
		// A partition that turned read-only since it joined the
		// transaction (a mirror topic again, after a failback) is not
		// ours to write: the transaction ends without its marker there.
		if err := plugin.CheckTopicChange(h.Plugins(), plugin.TopicChange{Topic: tp.Topic, Op: plugin.OpTxnMarkers}); err != nil {
			p.log.Info("transaction ends without a marker in a partition that refuses it", "transactional_id", e.id,
				"topic", tp.Topic, "partition", tp.Partition, "reason", err)
			continue
		}
		t := img.Topics[tp.Topic]
		if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
			continue // deleted: no marker is needed
		}
		switch leader := t.Partitions[tp.Partition].Leader; {
		case leader == h.NodeID():
			local = append(local, tp)
		case leader < 0:
			failed = append(failed, tp)
			errs = append(errs, fmt.Errorf("%s-%d has no leader: %w", tp.Topic, tp.Partition, kerr.LeaderNotAvailable))
		default:
			remote[leader] = append(remote[leader], tp)
		}
	}
	var mu sync.Mutex
	fail := func(tp plugin.TopicPartition, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, tp)
		errs = append(errs, err)
	}
	var wg sync.WaitGroup
	for _, tp := range local {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Contain(func() {
				if err := p.writeLocalMarker(ctx, tp, m); err != nil {
					fail(tp, err)
				}
			})
		}()
	}
	for node, parts := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Contain(func() {
				for tp, err := range p.sendMarkers(ctx, node, parts, e) {
					fail(tp, err)
				}
			})
		}()
	}
	wg.Wait()
	return failed, errors.Join(errs...)
}

// sendMarkers sends e's markers for parts to broker node, their leader,
// and returns the partitions that failed.
func (p *Plugin) sendMarkers(ctx context.Context, node int32, parts []plugin.TopicPartition, e ending) map[plugin.TopicPartition]error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	rm := kmsg.NewWriteTxnMarkersRequestMarker()
	rm.ProducerID, rm.ProducerEpoch, rm.Committed, rm.CoordinatorEpoch = e.pid, e.epoch, e.commit, e.coordEpoch
	byTopic := map[string]int{}
	for _, tp := range parts {
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(rm.Topics)
			byTopic[tp.Topic] = i
			rt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			rt.Topic = tp.Topic
			rm.Topics = append(rm.Topics, rt)
		}
		rm.Topics[i].Partitions = append(rm.Topics[i].Partitions, tp.Partition)
	}
	req.Markers = append(req.Markers, rm)
	failed := map[plugin.TopicPartition]error{}
	ctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	kresp, err := p.Host().Send(ctx, node, req)
	if err != nil {
		for _, tp := range parts {
			failed[tp] = fmt.Errorf("markers to broker %d: %w", node, err)
		}
		return failed
	}
	resp := kresp.(*kmsg.WriteTxnMarkersResponse)
	done := map[plugin.TopicPartition]bool{}
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, part := range t.Partitions {
				tp := plugin.TopicPartition{Topic: t.Topic, Partition: part.Partition}
				done[tp] = true
				if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
					failed[tp] = fmt.Errorf("%s-%d on broker %d: %w", tp.Topic, tp.Partition, node, err)
				}
			}
		}
	}
	for _, tp := range parts {
		if !done[tp] {
			failed[tp] = fmt.Errorf("%s-%d: broker %d did not answer for it", tp.Topic, tp.Partition, node)
		}
	}
	return failed
}

// writeLocalMarker writes one marker to a partition this broker leads,
// with acks=all: through the plugin that owns the partition's topic (the
// groups plugin for its offsets topic), or straight to the partition.
func (p *Plugin) writeLocalMarker(ctx context.Context, tp plugin.TopicPartition, m engine.Marker) error {
	h := p.Host()
	for _, w := range plugin.All[plugin.TxnMarkerWriter](h.Plugins()) {
		if handled, err := w.WriteTxnMarker(ctx, tp, m); handled {
			return err
		}
	}
	t := h.Metadata().Image().Topics[tp.Topic]
	if t == nil || int(tp.Partition) >= len(t.Partitions) {
		return nil
	}
	epoch, err := h.CheckWritable(t.ID, tp.Partition)
	if err != nil {
		return fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, err)
	}
	ep := h.Partition(t.ID, tp.Partition)
	if ep == nil {
		return fmt.Errorf("%s-%d is not open yet: %w", tp.Topic, tp.Partition, kerr.NotLeaderForPartition)
	}
	last, err := ep.WriteTxnMarkers(ctx, m)
	if err == nil {
		err = h.AwaitReplicated(ctx, t.ID, tp.Partition, epoch, last, markerTimeout)
	}
	if err != nil {
		return fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, err)
	}
	return nil
}
