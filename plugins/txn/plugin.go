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
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server"
)

// Topic is the internal topic holding transaction state.
const Topic = "__transaction_state"

// offsetsTopic is the consumer groups' topic: AddOffsetsToTxn adds its
// partition of the group to the transaction.
const offsetsTopic = "__consumer_offsets"

// maxEpoch is the last producer epoch handed out for a producer id; the
// next bump moves the transactional id to a new producer id (Kafka keeps
// Short.MaxValue for itself).
const maxEpoch = 32766

// Config is the plugin's part of the broker properties.
type Config struct {
	Partitions        int32         // transaction.state.log.num.partitions (50)
	ReplicationFactor int16         // transaction.state.log.replication.factor (1 here; Kafka's is 3)
	SegmentBytes      int64         // transaction.state.log.segment.bytes (104857600)
	MaxTimeout        time.Duration // transaction.max.timeout.ms (900000)
	AbortInterval     time.Duration // transaction.abort.timed.out.transaction.cleanup.interval.ms (10000)
	OffsetsPartitions int32         // offsets.topic.num.partitions (50), to route AddOffsetsToTxn
}

// ParseConfig reads the plugin's keys from broker properties, with Kafka's
// defaults.
func ParseConfig(props map[string]string) (Config, error) {
	var errs []error
	num := func(key string, def int64) int64 {
		s, ok := props[key]
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive integer", key, s))
			return def
		}
		return n
	}
	c := Config{
		Partitions:        int32(num("transaction.state.log.num.partitions", 50)),
		ReplicationFactor: int16(num("transaction.state.log.replication.factor", 1)),
		SegmentBytes:      num("transaction.state.log.segment.bytes", 104857600),
		MaxTimeout:        time.Duration(num("transaction.max.timeout.ms", 900000)) * time.Millisecond,
		AbortInterval:     time.Duration(num("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000)) * time.Millisecond,
		OffsetsPartitions: int32(num("offsets.topic.num.partitions", 50)),
	}
	return c, errors.Join(errs...)
}

// Plugin is the transaction coordinator. It implements server.APIHandler,
// server.CoordinatorLocator, server.LeaderObserver, server.Lifecycle and
// server.TxnCoordinator.
type Plugin struct {
	cfg    Config
	cfgErr error
	log    *slog.Logger
	rt     *coord.Runtime
	now    func() time.Time

	mu      sync.Mutex
	host    server.Host // nil until Start
	pidNext int64       // [pidNext, pidEnd) allocated and unused
	pidEnd  int64
	ctx     context.Context // canceled by Stop: background completions end
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

var (
	_ server.APIHandler         = (*Plugin)(nil)
	_ server.CoordinatorLocator = (*Plugin)(nil)
	_ server.LeaderObserver     = (*Plugin)(nil)
	_ server.Lifecycle          = (*Plugin)(nil)
	_ server.TxnCoordinator     = (*Plugin)(nil)
	_ server.TxnPartitionAdder  = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties. An invalid
// property makes Start fail.
func New(props map[string]string, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, cfgErr: err, log: log.With("plugin", "txn"), now: time.Now}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.rt = coord.New(coord.Config{Topic: Topic, Partitions: cfg.Partitions, Logger: p.log,
		New: func(int32) coord.StateMachine { return &shardState{p: p, txns: map[string]*txnMeta{}} }})
	return p
}

// Start implements server.Lifecycle.
func (p *Plugin) Start(_ context.Context, host server.Host) error {
	if p.cfgErr != nil {
		return fmt.Errorf("txn: %w", p.cfgErr)
	}
	p.mu.Lock()
	p.host = host
	p.mu.Unlock()
	p.rt.Start(host.Engine())
	return nil
}

// Stop implements server.Lifecycle.
func (p *Plugin) Stop(context.Context) error {
	p.cancel()
	p.rt.Stop()
	p.wg.Wait()
	return nil
}

// OnLeaderChange implements server.LeaderObserver.
func (p *Plugin) OnLeaderChange(c server.LeaderChange) {
	if c.Topic == Topic {
		p.rt.SetLeader(c.TopicID, c.Partition, c.Leader, c.LeaderEpoch)
	}
}

func (p *Plugin) getHost() server.Host {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.host
}

func (p *Plugin) image() *raftmeta.Image {
	if h := p.getHost(); h != nil {
		return h.Metadata().Image()
	}
	return nil
}

// partitionCount is an internal topic's real partition count (it may have
// been created by an earlier run with other properties), def if absent.
func (p *Plugin) partitionCount(topic string, def int32) int32 {
	if img := p.image(); img != nil {
		if t := img.Topics[topic]; t != nil && len(t.Partitions) > 0 {
			return int32(len(t.Partitions))
		}
	}
	return def
}

func (p *Plugin) partitionFor(txnID string) int32 {
	return coord.PartitionFor(txnID, p.partitionCount(Topic, p.cfg.Partitions))
}

// LocateCoordinator implements server.CoordinatorLocator.
func (p *Plugin) LocateCoordinator(keyType int8, key string) (server.InternalTopic, int32, bool) {
	if keyType != server.CoordinatorTransaction {
		return server.InternalTopic{}, 0, false
	}
	return server.InternalTopic{
		Name: Topic, Partitions: p.cfg.Partitions, ReplicationFactor: p.cfg.ReplicationFactor,
		Configs: map[string]string{
			"cleanup.policy":   "compact",
			"compression.type": "uncompressed",
			"segment.bytes":    strconv.FormatInt(p.cfg.SegmentBytes, 10),
		},
	}, p.partitionFor(key), true
}

// APIVersions implements server.APIHandler. EndTxn v5 is KIP-890 part 2
// (transaction.version 2, which the broker finalizes because the plugin
// is a server.TxnPartitionAdder): the epoch is bumped at every end.
func (p *Plugin) APIVersions() []kmsg.ApiVersionsResponseApiKey {
	return []kmsg.ApiVersionsResponseApiKey{
		{ApiKey: 24, MinVersion: 0, MaxVersion: 5}, // AddPartitionsToTxn
		{ApiKey: 25, MinVersion: 0, MaxVersion: 4}, // AddOffsetsToTxn
		{ApiKey: 26, MinVersion: 0, MaxVersion: 5}, // EndTxn (v5: epoch bump)
		{ApiKey: 27, MinVersion: 0, MaxVersion: 1}, // WriteTxnMarkers
		{ApiKey: 65, MinVersion: 0, MaxVersion: 0}, // DescribeTransactions
		{ApiKey: 66, MinVersion: 0, MaxVersion: 2}, // ListTransactions
	}
}

// NewRequest implements server.APIHandler.
func (p *Plugin) NewRequest(key int16) kmsg.Request { return kmsg.RequestForKey(key) }

// HandleRequest implements server.APIHandler.
func (p *Plugin) HandleRequest(ctx context.Context, rc *server.RequestContext, req kmsg.Request) (kmsg.Response, error) {
	switch req := req.(type) {
	case *kmsg.AddPartitionsToTxnRequest:
		return p.handleAddPartitions(ctx, rc, req), nil
	case *kmsg.AddOffsetsToTxnRequest:
		return p.handleAddOffsets(ctx, rc, req), nil
	case *kmsg.EndTxnRequest:
		return p.handleEndTxn(ctx, rc, req), nil
	case *kmsg.WriteTxnMarkersRequest:
		return p.handleWriteTxnMarkers(ctx, rc, req), nil
	case *kmsg.DescribeTransactionsRequest:
		return p.handleDescribe(ctx, rc, req), nil
	case *kmsg.ListTransactionsRequest:
		return p.handleList(ctx, rc, req), nil
	}
	return nil, fmt.Errorf("txn: unexpected request %T", req)
}

// do runs fn on the transactional id's shard. Errors carry Kafka codes.
func (p *Plugin) do(ctx context.Context, txnID string, fn func(s *shardState) error) error {
	return p.rt.Do(ctx, p.partitionFor(txnID), func(sh *coord.Shard) error {
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

// producerID allocates a producer id from blocks the metadata quorum hands
// out, as the broker does for idempotent producers.
func (p *Plugin) producerID(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidNext >= p.pidEnd {
		const block = 1000
		first, err := p.host.Metadata().AllocateProducerIDs(ctx, block)
		if err != nil {
			return -1, fmt.Errorf("allocate producer ids: %w: %w", err, kerr.CoordinatorNotAvailable)
		}
		p.pidNext, p.pidEnd = first, first+block
	}
	id := p.pidNext
	p.pidNext++
	return id, nil
}

// completeLater writes an ending transaction's markers and final state in
// the background, after delay.
func (p *Plugin) completeLater(e ending, delay time.Duration) {
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
		p.complete(p.ctx, e)
	}()
}

// complete writes the markers of an ending transaction to every partition
// it touched, then its CompleteCommit or CompleteAbort state. A failure
// leaves it in its Prepare state and retries later: the outcome is
// already decided and the markers are idempotent for consumers.
func (p *Plugin) complete(ctx context.Context, e ending) error {
	if err := p.writeMarkers(ctx, e); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("writing transaction markers; retrying", "transactional_id", e.id, "err", err)
			p.completeLater(e, time.Second)
		}
		return err
	}
	return p.do(ctx, e.id, func(s *shardState) error {
		m := s.txns[e.id]
		want := stPrepareAbort
		if e.commit {
			want = stPrepareCommit
		}
		if m == nil || m.pid != e.pid || m.epoch != e.epoch || m.state != want {
			return nil // completed already
		}
		n := m.clone()
		n.state, n.parts, n.startMs = stCompleteAbort, map[server.TopicPartition]bool{}, -1
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
}

func (p *Plugin) writeMarkers(ctx context.Context, e ending) error {
	m := engine.Marker{ProducerID: e.pid, ProducerEpoch: e.epoch, CoordinatorEpoch: e.coordEpoch, Commit: e.commit}
	errs := make([]error, len(e.parts))
	var wg sync.WaitGroup
	for i, tp := range e.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.writeMarker(ctx, tp, m)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeMarker writes one marker: through the plugin that owns the
// partition's topic (the groups plugin for __consumer_offsets), or
// straight to the partition. A partition deleted meanwhile needs none.
func (p *Plugin) writeMarker(ctx context.Context, tp server.TopicPartition, m engine.Marker) error {
	h := p.getHost()
	for _, pl := range h.Plugins() {
		if w, ok := pl.(server.TxnMarkerWriter); ok {
			if handled, err := w.WriteTxnMarker(ctx, tp, m); handled {
				return err
			}
		}
	}
	t := h.Metadata().Image().Topics[tp.Topic]
	if t == nil || int(tp.Partition) >= len(t.Partitions) {
		return nil
	}
	if t.Partitions[tp.Partition].Leader != h.NodeID() {
		return fmt.Errorf("%s-%d is led by broker %d: %w", tp.Topic, tp.Partition, t.Partitions[tp.Partition].Leader, kerr.NotLeaderForPartition)
	}
	ep := h.Engine().Partition(engine.TopicID(t.ID), tp.Partition)
	if ep == nil {
		return fmt.Errorf("%s-%d is not open yet: %w", tp.Topic, tp.Partition, kerr.NotLeaderForPartition)
	}
	if _, err := ep.WriteTxnMarkers(ctx, m); err != nil {
		return fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, err)
	}
	return nil
}
