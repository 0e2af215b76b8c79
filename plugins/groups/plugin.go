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
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server"
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
	var errs []error
	num := func(key string, def int64) int64 {
		s, ok := props[key]
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a non-negative integer", key, s))
			return def
		}
		return n
	}
	c := Config{
		Partitions:        int32(num("offsets.topic.num.partitions", 50)),
		ReplicationFactor: int16(num("offsets.topic.replication.factor", 1)),
		SegmentBytes:      num("offsets.topic.segment.bytes", 104857600),
		Retention:         time.Duration(num("offsets.retention.minutes", 10080)) * time.Minute,
		RetentionCheck:    time.Duration(num("offsets.retention.check.interval.ms", 600000)) * time.Millisecond,
		InitialDelay:      time.Duration(num("group.initial.rebalance.delay.ms", 3000)) * time.Millisecond,
		MinSession:        time.Duration(num("group.min.session.timeout.ms", 6000)) * time.Millisecond,
		MaxSession:        time.Duration(num("group.max.session.timeout.ms", 1800000)) * time.Millisecond,
		MaxSize:           int(num("group.max.size", 1<<31-1)),
		MaxMetadata:       int(num("offset.metadata.max.bytes", 4096)),
	}
	if c.Partitions <= 0 || c.ReplicationFactor <= 0 || c.RetentionCheck <= 0 || c.MaxSize <= 0 {
		errs = append(errs, errors.New("offsets.topic.num.partitions, offsets.topic.replication.factor, offsets.retention.check.interval.ms and group.max.size must be positive"))
	}
	return c, errors.Join(errs...)
}

// Plugin is the consumer-groups plugin. It implements server.APIHandler,
// server.CoordinatorLocator, server.LeaderObserver, server.Lifecycle and
// server.GroupOffsets.
type Plugin struct {
	cfg    Config
	cfgErr error
	log    *slog.Logger
	rt     *coord.Runtime
	now    func() time.Time

	mu   sync.Mutex
	host server.Host // nil until Start
}

var (
	_ server.APIHandler         = (*Plugin)(nil)
	_ server.CoordinatorLocator = (*Plugin)(nil)
	_ server.LeaderObserver     = (*Plugin)(nil)
	_ server.Lifecycle          = (*Plugin)(nil)
	_ server.GroupOffsets       = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties. An invalid
// property makes Start fail, so that the broker refuses to run with it.
func New(props map[string]string, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, cfgErr: err, log: log.With("plugin", "groups"), now: time.Now}
	p.rt = coord.New(coord.Config{Topic: Topic, Partitions: cfg.Partitions, Logger: p.log,
		New: func(partition int32) coord.StateMachine { return newShardState(p, partition) }})
	return p
}

// Start implements server.Lifecycle.
func (p *Plugin) Start(_ context.Context, host server.Host) error {
	if p.cfgErr != nil {
		return fmt.Errorf("groups: %w", p.cfgErr)
	}
	p.mu.Lock()
	p.host = host
	p.mu.Unlock()
	p.rt.Start(host.Engine())
	return nil
}

// Stop implements server.Lifecycle.
func (p *Plugin) Stop(context.Context) error {
	p.rt.Stop()
	return nil
}

// OnLeaderChange implements server.LeaderObserver.
func (p *Plugin) OnLeaderChange(c server.LeaderChange) {
	if c.Topic == Topic {
		p.rt.SetLeader(c.TopicID, c.Partition, c.Leader, c.LeaderEpoch)
	}
}

func (p *Plugin) image() *raftmeta.Image {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.host == nil {
		return nil
	}
	return p.host.Metadata().Image()
}

// partitionFor routes a group as Kafka does, over the partition count the
// topic really has (it was created with the configured count, possibly
// by an earlier run with other properties).
func (p *Plugin) partitionFor(group string) int32 {
	n := p.cfg.Partitions
	if img := p.image(); img != nil {
		if t := img.Topics[Topic]; t != nil && len(t.Partitions) > 0 {
			n = int32(len(t.Partitions))
		}
	}
	return coord.PartitionFor(group, n)
}

// LocateCoordinator implements server.CoordinatorLocator.
func (p *Plugin) LocateCoordinator(keyType int8, key string) (server.InternalTopic, int32, bool) {
	if keyType != server.CoordinatorGroup {
		return server.InternalTopic{}, 0, false
	}
	return server.InternalTopic{
		Name: Topic, Partitions: p.cfg.Partitions, ReplicationFactor: p.cfg.ReplicationFactor,
		Configs: map[string]string{
			"cleanup.policy":   "compact",
			"compression.type": "producer",
			"segment.bytes":    strconv.FormatInt(p.cfg.SegmentBytes, 10),
		},
	}, p.partitionFor(key), true
}

// APIVersions implements server.APIHandler.
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

// NewRequest implements server.APIHandler.
func (p *Plugin) NewRequest(key int16) kmsg.Request { return kmsg.RequestForKey(key) }

// HandleRequest implements server.APIHandler.
func (p *Plugin) HandleRequest(ctx context.Context, rc *server.RequestContext, req kmsg.Request) (kmsg.Response, error) {
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
	return p.rt.Do(ctx, p.partitionFor(group), func(sh *coord.Shard) error {
		return fn(sh.State().(*shardState))
	})
}

// --- server.GroupOffsets ---

// CommittedOffsets implements server.GroupOffsets.
func (p *Plugin) CommittedOffsets(ctx context.Context, group string) (map[server.TopicPartition]server.CommittedOffset, string, error) {
	var out map[server.TopicPartition]server.CommittedOffset
	state := stateDead.String()
	err := p.do(ctx, group, func(s *shardState) error {
		out = map[server.TopicPartition]server.CommittedOffset{}
		g := s.groups[group]
		if g == nil {
			return nil
		}
		state = g.state.String()
		for t, o := range g.offsets {
			out[server.TopicPartition{Topic: t.topic, Partition: t.partition}] = server.CommittedOffset{Offset: o.offset, LeaderEpoch: o.epoch, Metadata: o.metadata}
		}
		return nil
	})
	return out, state, err
}

// CommitOffsets implements server.GroupOffsets.
func (p *Plugin) CommitOffsets(ctx context.Context, group string, offsets map[server.TopicPartition]server.CommittedOffset) error {
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

// GroupState implements server.GroupOffsets.
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
