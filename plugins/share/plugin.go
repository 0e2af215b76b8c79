// Package share is Tandem's share-groups plugin (KIP-932, queues for
// Kafka): the share APIs (ShareGroupHeartbeat, ShareGroupDescribe,
// ShareFetch, ShareAcknowledge, the admin APIs on share-group offsets and
// the share-group state APIs), the share-partitions kept by each
// partition's leader, and the share coordinator over the internal topic
// __share_group_state. Share groups' membership lives with the other
// groups in the consumer-groups plugin (plugins/groups), which this
// plugin reaches through plugin.ShareGroupCoordinator.
package share

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Topic is the internal topic of share-partition states.
const Topic = "__share_group_state"

// Config is the plugin's part of the broker properties.
type Config struct {
	Partitions        int32 // share.coordinator.state.topic.num.partitions (50)
	ReplicationFactor int16 // share.coordinator.state.topic.replication.factor (3, capped at the live brokers)
	MinISR            int   // share.coordinator.state.topic.min.isr (2, capped at the replication factor)
	SegmentBytes      int64 // share.coordinator.state.topic.segment.bytes (104857600)
	MaxSessions       int   // group.share.max.share.sessions (2000): share sessions of the broker
}

// ParseConfig reads the plugin's keys from broker properties, with Kafka's
// defaults.
func ParseConfig(props map[string]string) (Config, error) {
	r := plugin.ReadProps(props)
	c := Config{
		Partitions:        int32(r.Int("share.coordinator.state.topic.num.partitions", 50, 1, math.MaxInt32)),
		ReplicationFactor: int16(r.Int("share.coordinator.state.topic.replication.factor", 3, 1, math.MaxInt16)),
		MinISR:            int(r.Int("share.coordinator.state.topic.min.isr", 2, 1, math.MaxInt16)),
		SegmentBytes:      r.Int("share.coordinator.state.topic.segment.bytes", 104857600, 0, math.MaxInt32),
		MaxSessions:       int(r.Int("group.share.max.share.sessions", 2000, 1, math.MaxInt32)),
	}
	return c, r.Err()
}

// Plugin is the share-groups plugin: a plugin.APIHandler, through its
// plugin.Coordinator a plugin.Lifecycle and plugin.LeaderObserver, and
// the plugin.ShareStateStore, plugin.ShareMemberListener and
// plugin.ShareGroupOffsets of the other plugins.
type Plugin struct {
	*plugin.Coordinator
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	stopped  bool
	groups   plugin.ShareGroupCoordinator // found at Start
	parts    map[stateKey]*sharePartition
	sessions map[sessionKey]*session
	wg       sync.WaitGroup // lock timers and releases

	m atomic.Pointer[shareMetrics]
}

var (
	_ plugin.APIHandler     = (*Plugin)(nil)
	_ plugin.Lifecycle      = (*Plugin)(nil)
	_ plugin.LeaderObserver = (*Plugin)(nil)
	_ plugin.PropsOwner     = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties. An invalid
// property makes Start fail.
func New(props map[string]string, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, log: log.With("plugin", "share"), parts: map[stateKey]*sharePartition{}, sessions: map[sessionKey]*session{}}
	p.m.Store(newShareMetrics(prom.NewSet()))
	p.Coordinator = plugin.NewCoordinator(plugin.CoordinatorConfig{
		Topic: plugin.InternalTopic{Name: Topic, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor,
			Configs: map[string]string{"segment.bytes": strconv.FormatInt(cfg.SegmentBytes, 10),
				"min.insync.replicas": strconv.Itoa(cfg.MinISR)}},
		New:    func(int32) coord.StateMachine { return &states{p: p, m: map[stateKey]*shareState{}} },
		Logger: p.log,
		Err:    err,
	})
	return p
}

// Start implements plugin.Lifecycle: share groups need the consumer-groups
// plugin, which keeps their membership.
func (p *Plugin) Start(ctx context.Context, host plugin.Host) error {
	g, ok := plugin.Find[plugin.ShareGroupCoordinator](host.Plugins())
	if !ok {
		return errors.New("share groups need the consumer-groups plugin")
	}
	p.groups = g
	if err := p.Coordinator.Start(ctx, host); err != nil {
		return err
	}
	p.startMetrics(host.MetricsSet())
	return nil
}

// Stop implements plugin.Lifecycle: lock timers and releases end before
// the coordinator stops.
func (p *Plugin) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	parts := p.parts
	p.parts = map[stateKey]*sharePartition{}
	p.mu.Unlock()
	for _, sp := range parts {
		sp.mu.Lock()
		sp.drop()
		sp.mu.Unlock()
	}
	p.wg.Wait()
	return p.Coordinator.Stop(ctx)
}

// LocateCoordinator implements plugin.CoordinatorLocator: no key type is
// served. Kafka's SHARE key type (2) is KIP-1279's MIRROR here, and the
// share coordinator is found by the broker from the metadata image.
func (p *Plugin) LocateCoordinator(int8, string) (plugin.InternalTopic, int32, bool) {
	return plugin.InternalTopic{}, 0, false
}

// OnLeaderChange implements plugin.LeaderObserver: coordinator shards
// follow __share_group_state, and share-partitions of a partition this
// broker no longer leads are dropped (the new leader loads their state).
func (p *Plugin) OnLeaderChange(ch plugin.LeaderChange) {
	p.Coordinator.OnLeaderChange(ch)
	if ch.Leader || ch.Topic == Topic {
		return
	}
	p.mu.Lock()
	var drop []stateKey
	for k := range p.parts {
		if k.topic == ch.TopicID && k.partition == ch.Partition {
			drop = append(drop, k)
		}
	}
	p.mu.Unlock()
	for _, k := range drop {
		p.evict(k)
	}
}

// OwnsProp implements plugin.PropsOwner.
func (p *Plugin) OwnsProp(key string) bool {
	return strings.HasPrefix(key, "share.coordinator.") || key == "group.share.max.share.sessions"
}

// groupConfig is a share group's configuration.
func (p *Plugin) groupConfig(group string) plugin.ShareGroupConfig {
	return p.groups.ShareGroupConfig(group)
}

// APIs implements plugin.APIHandler. The share group heartbeat and
// describe go to the consumer-groups plugin, found at Start (p.groups).
func (p *Plugin) APIs() []plugin.API {
	return []plugin.API{
		plugin.Answer(kmsg.ShareGroupHeartbeat, 1, 1, func(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareGroupHeartbeatRequest) kmsg.Response {
			return p.groups.ShareGroupHeartbeat(ctx, rc, req)
		}),
		plugin.Answer(kmsg.ShareGroupDescribe, 1, 1, func(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareGroupDescribeRequest) kmsg.Response {
			return redactUnauthorizedTopics(rc, p.groups.ShareGroupDescribe(ctx, rc, req))
		}),
		plugin.Answer(kmsg.ShareFetch, 1, 2, func(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareFetchRequest) kmsg.Response {
			resp := p.handleShareFetch(ctx, rc, req)
			p.stats().countFetch(resp)
			return resp
		}),
		plugin.Answer(kmsg.ShareAcknowledge, 1, 2, func(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareAcknowledgeRequest) kmsg.Response {
			resp := p.handleShareAcknowledge(ctx, rc, req)
			p.stats().countAcknowledge(resp)
			return resp
		}),
		plugin.Answer(kmsg.InitializeShareGroupState, 0, 0, p.handleInitializeState),
		plugin.Answer(kmsg.ReadShareGroupState, 0, 0, p.handleReadState),
		plugin.Answer(kmsg.WriteShareGroupState, 0, 1, p.handleWriteState),
		plugin.Answer(kmsg.DeleteShareGroupState, 0, 0, p.handleDeleteState),
		plugin.Answer(kmsg.ReadShareGroupStateSummary, 0, 1, p.handleReadStateSummary),
		plugin.Answer(kmsg.DescribeShareGroupOffsets, 0, 1, p.handleDescribeOffsets),
		plugin.Answer(kmsg.AlterShareGroupOffsets, 0, 0, p.handleAlterOffsets),
		plugin.Answer(kmsg.DeleteShareGroupOffsets, 0, 0, p.handleDeleteOffsets),
	}
}

// redactUnauthorizedTopics answers TOPIC_AUTHORIZATION_FAILED, and
// nothing else, for a described share group whose members are assigned a
// topic the principal may not DESCRIBE, as Kafka's KafkaApis does after
// its group coordinator answered: all or nothing, so that the group's
// state leaks no topic names.
func redactUnauthorizedTopics(rc *plugin.RequestContext, resp *kmsg.ShareGroupDescribeResponse) *kmsg.ShareGroupDescribeResponse {
	for i, g := range resp.Groups {
		if g.ErrorCode != 0 {
			continue
		}
		denied := false
		for _, m := range g.Members {
			for _, tp := range m.Assignment.TopicPartitions {
				if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, tp.Topic) {
					denied = true
				}
			}
		}
		if denied {
			r := kmsg.NewShareGroupDescribeResponseGroup()
			r.GroupID, r.AuthorizedOperations = g.GroupID, -2147483648
			r.ErrorCode = kerr.TopicAuthorizationFailed.Code
			r.ErrorMessage = kmsg.StringPtr("The group has described topic(s) that the client is not authorized to describe.")
			resp.Groups[i] = r
		}
	}
	return resp
}
