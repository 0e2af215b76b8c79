// Package groups is Tandem's consumer-group coordinator: Kafka's classic
// group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed
// offsets (OffsetCommit, OffsetFetch, OffsetDelete) and group
// administration (DescribeGroups, ListGroups, DeleteGroups), with state in
// the compacted internal topic __consumer_offsets, on the partitioned
// coordinator runtime of engine/coord.
package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Topic is the internal topic holding groups and committed offsets.
const Topic = "__consumer_offsets"

// Config is the plugin's part of the broker properties.
type Config struct {
	Partitions        int32         // offsets.topic.num.partitions (50)
	ReplicationFactor int16         // offsets.topic.replication.factor (3, capped at the live brokers)
	BrokerMinISR      int           // min.insync.replicas (1), the broker's, which the offsets topic follows
	SegmentBytes      int64         // offsets.topic.segment.bytes (104857600)
	Retention         time.Duration // offsets.retention.minutes (10080)
	RetentionCheck    time.Duration // offsets.retention.check.interval.ms (600000)
	InitialDelay      time.Duration // group.initial.rebalance.delay.ms (3000)
	MinSession        time.Duration // group.min.session.timeout.ms (6000)
	MaxSession        time.Duration // group.max.session.timeout.ms (1800000)
	MaxSize           int           // group.max.size (unlimited)
	MaxMetadata       int           // offset.metadata.max.bytes (4096)

	Consumer Modern // group.consumer.*: KIP-848 consumer groups
	Share    Modern // group.share.*: KIP-932 share groups
	// Assignors are group.consumer.assignors ("uniform,range"): the
	// server assignors consumers may name; the first is the default.
	Assignors []string
	// Migration is group.consumer.migration.policy: which conversions
	// of an empty group between the classic and the consumer protocol
	// are allowed ("bidirectional", "upgrade", "downgrade", "disabled").
	Migration string
	// Share-partition defaults, which share groups may override within
	// the bounds: group.share.record.lock.duration.ms (30000, from
	// group.share.min.record.lock.duration.ms 15000 to
	// group.share.max.record.lock.duration.ms 60000),
	// group.share.delivery.count.limit (5, from 2 to 10) and
	// group.share.partition.max.record.locks (2000).
	RecordLock, MinRecordLock, MaxRecordLock time.Duration
	DeliveryLimit                            int
	MaxRecordLocks                           int
}

// Modern is the configuration of one kind of heartbeat-driven group.
type Modern struct {
	Session, MinSession, MaxSession       time.Duration // *.session.timeout.ms (45000, 45000, 60000)
	Heartbeat, MinHeartbeat, MaxHeartbeat time.Duration // *.heartbeat.interval.ms (5000, 5000, 15000)
	MaxSize                               int           // *.max.size (consumer: unlimited, share: 200)
}

// ParseConfig reads the plugin's keys from broker properties, with Kafka's
// defaults.
func ParseConfig(props map[string]string) (Config, error) {
	r := plugin.ReadProps(props)
	ms := func(key string, def, min int64) time.Duration {
		return time.Duration(r.Int(key, def, min, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	}
	modern := func(prefix string, maxSize int64) Modern {
		return Modern{
			Session: ms(prefix+"session.timeout.ms", 45000, 1), MinSession: ms(prefix+"min.session.timeout.ms", 45000, 1),
			MaxSession: ms(prefix+"max.session.timeout.ms", 60000, 1),
			Heartbeat:  ms(prefix+"heartbeat.interval.ms", 5000, 1), MinHeartbeat: ms(prefix+"min.heartbeat.interval.ms", 5000, 1),
			MaxHeartbeat: ms(prefix+"max.heartbeat.interval.ms", 15000, 1),
			MaxSize:      int(r.Int(prefix+"max.size", maxSize, 1, math.MaxInt32)),
		}
	}
	c := Config{
		Partitions:        int32(r.Int("offsets.topic.num.partitions", 50, 1, math.MaxInt32)),
		ReplicationFactor: int16(r.Int("offsets.topic.replication.factor", 3, 1, math.MaxInt16)),
		BrokerMinISR:      int(r.Int("min.insync.replicas", 1, 1, math.MaxInt16)),
		SegmentBytes:      r.Int("offsets.topic.segment.bytes", 104857600, 0, math.MaxInt32),
		Retention:         time.Duration(r.Int("offsets.retention.minutes", 10080, 0, math.MaxInt64/int64(time.Minute))) * time.Minute,
		RetentionCheck:    ms("offsets.retention.check.interval.ms", 600000, 1),
		InitialDelay:      ms("group.initial.rebalance.delay.ms", 3000, 0),
		MinSession:        ms("group.min.session.timeout.ms", 6000, 0),
		MaxSession:        ms("group.max.session.timeout.ms", 1800000, 0),
		MaxSize:           int(r.Int("group.max.size", math.MaxInt32, 1, math.MaxInt32)),
		MaxMetadata:       int(r.Int("offset.metadata.max.bytes", 4096, 0, math.MaxInt32)),
		Consumer:          modern("group.consumer.", math.MaxInt32),
		Share:             modern("group.share.", 200),
		RecordLock:        ms("group.share.record.lock.duration.ms", 30000, 1),
		MinRecordLock:     ms("group.share.min.record.lock.duration.ms", 15000, 1),
		MaxRecordLock:     ms("group.share.max.record.lock.duration.ms", 60000, 1),
		DeliveryLimit:     int(r.Int("group.share.delivery.count.limit", 5, 2, 10)),
		MaxRecordLocks:    int(r.Int("group.share.partition.max.record.locks", 2000, 100, 10000)),
		Assignors:         []string{"uniform", "range"},
		Migration:         "bidirectional",
	}
	var errs []error
	if v, ok := props["group.consumer.assignors"]; ok {
		c.Assignors = nil
		for _, a := range strings.Split(v, ",") {
			name, known := assignorName(strings.TrimSpace(a))
			if !known {
				errs = append(errs, fmt.Errorf("group.consumer.assignors=%q: unknown assignor %q (uniform and range are served)", v, a))
				continue
			}
			c.Assignors = append(c.Assignors, name)
		}
		if len(c.Assignors) == 0 && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("group.consumer.assignors=%q: empty", v))
		}
	}
	if v, ok := props["group.consumer.migration.policy"]; ok {
		switch p := strings.ToLower(strings.TrimSpace(v)); p {
		case "bidirectional", "upgrade", "downgrade", "disabled":
			c.Migration = p
		default:
			errs = append(errs, fmt.Errorf("group.consumer.migration.policy=%q: want bidirectional, upgrade, downgrade or disabled", v))
		}
	}
	for _, m := range []struct {
		name string
		m    Modern
	}{{"group.consumer.", c.Consumer}, {"group.share.", c.Share}} {
		if m.m.Session < m.m.MinSession || m.m.Session > m.m.MaxSession {
			errs = append(errs, fmt.Errorf("%ssession.timeout.ms=%d: want from %d to %d", m.name, m.m.Session.Milliseconds(), m.m.MinSession.Milliseconds(), m.m.MaxSession.Milliseconds()))
		}
		if m.m.Heartbeat < m.m.MinHeartbeat || m.m.Heartbeat > m.m.MaxHeartbeat || m.m.Heartbeat >= m.m.Session {
			errs = append(errs, fmt.Errorf("%sheartbeat.interval.ms=%d: want from %d to %d and below the session timeout", m.name, m.m.Heartbeat.Milliseconds(), m.m.MinHeartbeat.Milliseconds(), m.m.MaxHeartbeat.Milliseconds()))
		}
	}
	if c.RecordLock < c.MinRecordLock || c.RecordLock > c.MaxRecordLock {
		errs = append(errs, fmt.Errorf("group.share.record.lock.duration.ms=%d: want from %d to %d", c.RecordLock.Milliseconds(), c.MinRecordLock.Milliseconds(), c.MaxRecordLock.Milliseconds()))
	}
	return c, errors.Join(append([]error{r.Err()}, errs...)...)
}

// Plugin is the consumer-groups plugin: a plugin.APIHandler, and through
// its plugin.Coordinator a plugin.Lifecycle, plugin.LeaderObserver and
// plugin.CoordinatorLocator. It offers plugin.GroupOffsets and
// plugin.TxnMarkerWriter to the other plugins.
type Plugin struct {
	*plugin.Coordinator
	cfg Config
	log *slog.Logger
	now func() time.Time
}

var (
	_ plugin.APIHandler         = (*Plugin)(nil)
	_ plugin.CoordinatorLocator = (*Plugin)(nil)
	_ plugin.LeaderObserver     = (*Plugin)(nil)
	_ plugin.Lifecycle          = (*Plugin)(nil)
	_ plugin.GroupOffsets       = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties. An invalid
// property makes Start fail, so that the broker refuses to run with it.
func New(props map[string]string, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, log: log.With("plugin", "groups"), now: time.Now}
	p.Coordinator = plugin.NewCoordinator(plugin.CoordinatorConfig{
		KeyType:      plugin.CoordinatorGroup,
		BrokerMinISR: cfg.BrokerMinISR,
		Topic: plugin.InternalTopic{Name: Topic, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor,
			Configs: map[string]string{"compression.type": "producer", "segment.bytes": strconv.FormatInt(cfg.SegmentBytes, 10)}},
		New:    func(partition int32) coord.StateMachine { return newShardState(p, partition) },
		Logger: p.log,
		Err:    err,
	})
	return p
}

// APIs implements plugin.APIHandler.
func (p *Plugin) APIs() []plugin.API {
	return []plugin.API{
		plugin.Answer(kmsg.OffsetCommit, 0, 9, p.handleOffsetCommit),
		plugin.Answer(kmsg.OffsetFetch, 0, 9, p.handleOffsetFetch),
		plugin.Answer(kmsg.JoinGroup, 0, 9, p.handleJoin),
		plugin.Answer(kmsg.Heartbeat, 0, 4, p.handleHeartbeat),
		plugin.Answer(kmsg.LeaveGroup, 0, 5, p.handleLeave),
		plugin.Answer(kmsg.SyncGroup, 0, 5, p.handleSync),
		plugin.Answer(kmsg.DescribeGroups, 0, 6, p.handleDescribe),
		plugin.Answer(kmsg.ListGroups, 0, 5, p.handleList),
		plugin.Answer(kmsg.DeleteGroups, 0, 2, p.handleDeleteGroups),
		plugin.Answer(kmsg.TxnOffsetCommit, 0, 5, p.handleTxnOffsetCommit), // v6 names topics by ID
		plugin.Answer(kmsg.OffsetDelete, 0, 0, p.handleOffsetDelete),
		plugin.Answer(kmsg.ConsumerGroupHeartbeat, 0, 1, p.handleConsumerGroupHeartbeat),
		plugin.Answer(kmsg.ConsumerGroupDescribe, 0, 1, p.handleConsumerGroupDescribe),
	}
}

// do runs fn on the group's shard. Errors carry Kafka codes.
func (p *Plugin) do(ctx context.Context, group string, fn func(s *shardState) error) error {
	return p.Do(ctx, group, func(sh *coord.Shard) error {
		return fn(sh.State().(*shardState))
	})
}

// --- plugin.GroupOffsets ---

// CommittedOffsets implements plugin.GroupOffsets.
func (p *Plugin) CommittedOffsets(ctx context.Context, group string) (map[plugin.TopicPartition]plugin.CommittedOffset, string, error) {
	var out map[plugin.TopicPartition]plugin.CommittedOffset
	state := stateDead.String()
	err := p.do(ctx, group, func(s *shardState) error {
		out = map[plugin.TopicPartition]plugin.CommittedOffset{}
		g := s.groups[group]
		if g == nil {
			return nil
		}
		state = g.stateName()
		for t, o := range g.offsets {
			out[plugin.TopicPartition{Topic: t.topic, Partition: t.partition}] = plugin.CommittedOffset{Offset: o.offset, LeaderEpoch: o.epoch, Metadata: o.metadata}
		}
		return nil
	})
	return out, state, err
}

// CommitOffsets implements plugin.GroupOffsets.
func (p *Plugin) CommitOffsets(ctx context.Context, group string, offsets map[plugin.TopicPartition]plugin.CommittedOffset) error {
	return p.do(ctx, group, func(s *shardState) error {
		commits := map[tp]offset{}
		nowMs := p.now().UnixMilli()
		for t, o := range offsets {
			commits[tp{t.Topic, t.Partition}] = offset{offset: o.Offset, epoch: o.LeaderEpoch, metadata: o.Metadata, commitMs: nowMs}
		}
		g := s.groups[group]
		if g != nil && !g.isEmpty() {
			return fmt.Errorf("group %s has active members: %w", group, kerr.UnknownMemberID)
		}
		return s.commit(group, commits)
	})
}

// OffsetsPartition implements plugin.GroupOffsets.
func (p *Plugin) OffsetsPartition(group string) plugin.TopicPartition {
	return plugin.TopicPartition{Topic: Topic, Partition: p.PartitionFor(group)}
}

// GroupState implements plugin.GroupOffsets.
func (p *Plugin) GroupState(ctx context.Context, group string) (string, error) {
	state := stateDead.String()
	err := p.do(ctx, group, func(s *shardState) error {
		if g := s.groups[group]; g != nil {
			state = g.stateName()
		}
		return nil
	})
	return state, err
}
