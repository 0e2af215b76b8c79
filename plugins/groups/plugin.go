// Package groups is Tandem's consumer-group coordinator: Kafka's classic
// group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed
// offsets (OffsetCommit, OffsetFetch, OffsetDelete) and group
// administration (DescribeGroups, ListGroups, DeleteGroups), with state in
// the compacted internal topic __consumer_offsets, on the partitioned
// coordinator runtime of engine/coord.
package groups

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
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
	ReplicationFactor int16         // offsets.topic.replication.factor (1 here; Kafka's is 3)
	SegmentBytes      int64         // offsets.topic.segment.bytes (104857600)
	Retention         time.Duration // offsets.retention.minutes (10080)
	RetentionCheck    time.Duration // offsets.retention.check.interval.ms (600000)
	InitialDelay      time.Duration // group.initial.rebalance.delay.ms (3000)
	MinSession        time.Duration // group.min.session.timeout.ms (6000)
	MaxSession        time.Duration // group.max.session.timeout.ms (1800000)
	MaxSize           int           // group.max.size (unlimited)
	MaxMetadata       int           // offset.metadata.max.bytes (4096)
}

// ParseConfig reads the plugin's keys from broker properties, with Kafka's
// defaults.
func ParseConfig(props map[string]string) (Config, error) {
	r := plugin.ReadProps(props)
	ms := func(key string, def, min int64) time.Duration {
		return time.Duration(r.Int(key, def, min, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	}
	c := Config{
		Partitions:        int32(r.Int("offsets.topic.num.partitions", 50, 1, math.MaxInt32)),
		ReplicationFactor: int16(r.Int("offsets.topic.replication.factor", 1, 1, math.MaxInt16)),
		SegmentBytes:      r.Int("offsets.topic.segment.bytes", 104857600, 0, math.MaxInt32),
		Retention:         time.Duration(r.Int("offsets.retention.minutes", 10080, 0, math.MaxInt64/int64(time.Minute))) * time.Minute,
		RetentionCheck:    ms("offsets.retention.check.interval.ms", 600000, 1),
		InitialDelay:      ms("group.initial.rebalance.delay.ms", 3000, 0),
		MinSession:        ms("group.min.session.timeout.ms", 6000, 0),
		MaxSession:        ms("group.max.session.timeout.ms", 1800000, 0),
		MaxSize:           int(r.Int("group.max.size", math.MaxInt32, 1, math.MaxInt32)),
		MaxMetadata:       int(r.Int("offset.metadata.max.bytes", 4096, 0, math.MaxInt32)),
	}
	return c, r.Err()
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
		KeyType: plugin.CoordinatorGroup,
		Topic: plugin.InternalTopic{Name: Topic, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor,
			Configs: map[string]string{"compression.type": "producer", "segment.bytes": strconv.FormatInt(cfg.SegmentBytes, 10)}},
		New:    func(partition int32) coord.StateMachine { return newShardState(p, partition) },
		Logger: p.log,
		Err:    err,
	})
	return p
}

// APIVersions implements plugin.APIHandler.
func (p *Plugin) APIVersions() []kmsg.ApiVersionsResponseApiKey {
	return []kmsg.ApiVersionsResponseApiKey{
		{ApiKey: 8, MinVersion: 0, MaxVersion: 9},  // OffsetCommit
		{ApiKey: 9, MinVersion: 0, MaxVersion: 9},  // OffsetFetch
		{ApiKey: 11, MinVersion: 0, MaxVersion: 9}, // JoinGroup
		{ApiKey: 12, MinVersion: 0, MaxVersion: 4}, // Heartbeat
		{ApiKey: 13, MinVersion: 0, MaxVersion: 5}, // LeaveGroup
		{ApiKey: 14, MinVersion: 0, MaxVersion: 5}, // SyncGroup
		{ApiKey: 15, MinVersion: 0, MaxVersion: 5}, // DescribeGroups
		{ApiKey: 16, MinVersion: 0, MaxVersion: 5}, // ListGroups
		{ApiKey: 42, MinVersion: 0, MaxVersion: 2}, // DeleteGroups
		{ApiKey: 28, MinVersion: 0, MaxVersion: 5}, // TxnOffsetCommit (v6 names topics by ID)
		{ApiKey: 47, MinVersion: 0, MaxVersion: 0}, // OffsetDelete
	}
}

// NewRequest implements plugin.APIHandler.
func (p *Plugin) NewRequest(key int16) kmsg.Request { return kmsg.RequestForKey(key) }

// HandleRequest implements plugin.APIHandler.
func (p *Plugin) HandleRequest(ctx context.Context, rc *plugin.RequestContext, req kmsg.Request) (kmsg.Response, error) {
	switch req := req.(type) {
	case *kmsg.JoinGroupRequest:
		return p.handleJoin(ctx, rc, req), nil
	case *kmsg.SyncGroupRequest:
		return p.handleSync(ctx, rc, req), nil
	case *kmsg.HeartbeatRequest:
		return p.handleHeartbeat(ctx, rc, req), nil
	case *kmsg.LeaveGroupRequest:
		return p.handleLeave(ctx, rc, req), nil
	case *kmsg.OffsetCommitRequest:
		return p.handleOffsetCommit(ctx, rc, req), nil
	case *kmsg.OffsetFetchRequest:
		return p.handleOffsetFetch(ctx, rc, req), nil
	case *kmsg.DescribeGroupsRequest:
		return p.handleDescribe(ctx, rc, req), nil
	case *kmsg.ListGroupsRequest:
		return p.handleList(ctx, rc, req), nil
	case *kmsg.DeleteGroupsRequest:
		return p.handleDeleteGroups(ctx, rc, req), nil
	case *kmsg.OffsetDeleteRequest:
		return p.handleOffsetDelete(ctx, rc, req), nil
	case *kmsg.TxnOffsetCommitRequest:
		return p.handleTxnOffsetCommit(ctx, rc, req), nil
	}
	return nil, fmt.Errorf("groups: unexpected request %T", req)
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
		state = g.state.String()
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
		if g != nil && len(g.members) > 0 {
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
			state = g.state.String()
		}
		return nil
	})
	return state, err
}
