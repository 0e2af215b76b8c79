package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The plugin host: what plugin.Host offers a plugin, all of it here. A
// plugin is started with a pluginHost, the broker knowing which plugin it
// serves (contain.go says what happens when one panics).
//
// The plugin API (every hook, Host, the request context, the error
// codes, the contracts between plugins) is package plugin. The broker
// finds a plugin's hooks in Config.Plugins by type assertion (see New)
// and gives each plugin a pluginHost, which holds the broker without
// embedding it: a plugin reaches exactly the interfaces asserted below,
// never the rest of *Broker (Close, Engine, the raft controller) by a
// type assertion on its Host.

var (
	_ plugin.Host               = pluginHost{}
	_ plugin.ReplicaConvergence = pluginHost{}

	// The metadata quorum is what plugins get as plugin.Metadata
	// (package plugin does not import raftmeta, so the check is here).
	_ plugin.Metadata = (*raftmeta.Controller)(nil)
)

// RequestContext is what a handler knows of its request; handlers of the
// broker and of plugins share it.
type RequestContext = plugin.RequestContext

// pluginHost is the Host a plugin is started with: the broker, knowing
// which plugin it serves, so that Contain can blame the right one. Each
// of its methods forwards to the broker.
type pluginHost struct {
	b    *Broker
	name string
}

// NodeID implements plugin.Host.
func (h pluginHost) NodeID() int32 { return h.b.NodeID() }

// Partition implements plugin.Host: nil, not a nil *engine.Partition,
// when the broker does not host the partition.
func (h pluginHost) Partition(id engine.TopicID, p int32) plugin.Log {
	if ep := h.b.engine.Partition(id, p); ep != nil {
		return ep
	}
	return nil
}

// Metadata implements plugin.Host.
func (h pluginHost) Metadata() plugin.Metadata { return h.b.meta }

// MetricsSet implements plugin.Host: the broker's metrics set, served at
// /metrics.
func (h pluginHost) MetricsSet() *prom.Set { return h.b.metrics }

// EnsureTopic implements plugin.Host (internalTopics.ensure).
func (h pluginHost) EnsureTopic(ctx context.Context, t plugin.InternalTopic) (*metadata.Topic, error) {
	return h.b.topics.ensure(ctx, t)
}

// Send implements plugin.Host: it sends req to broker node over the
// inter-broker listener, authenticated as this broker, and returns its
// response (peerClients.send).
func (h pluginHost) Send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	return h.b.peers.send(ctx, h.b.meta.Image(), node, req)
}

// CheckWritable implements plugin.Host (and coord.Replicas): the checks
// of an acks=all produce before its append (producer.checkWritable).
func (h pluginHost) CheckWritable(id engine.TopicID, p int32) (int32, error) {
	return h.b.produce.checkWritable(id, p)
}

// AwaitReplicated implements plugin.Host (and coord.Replicas): the wait
// of an acks=all produce after its append (producer.awaitReplicated).
func (h pluginHost) AwaitReplicated(ctx context.Context, id engine.TopicID, p int32, leaderEpoch int32, last int64, timeout time.Duration) error {
	return h.b.produce.awaitReplicated(ctx, id, p, leaderEpoch, last, timeout)
}

// CheckSession implements plugin.Host (and coord.Replicas).
func (h pluginHost) CheckSession() error {
	return checkSession(h.b.member.session, h.b.cfg.NodeID, h.b.props.Cluster.SessionTimeout)
}

// Contain implements plugin.Host: it runs f, work of the plugin outside
// any request, so that a panic in it fails the plugin rather than ending
// the broker.
func (h pluginHost) Contain(f func()) { h.b.plugins.contain(h.name, "background work", f) }

// Plugins implements plugin.Host.
func (h pluginHost) Plugins() []any { return h.b.Plugins() }

// AwaitISRTruncated implements plugin.ReplicaConvergence: it waits until
// every follower in the ISR of a partition this broker leads has fetched,
// since the call, with a log that matches the leader's
// (replication.Manager.AwaitISRTruncated).
func (h pluginHost) AwaitISRTruncated(ctx context.Context, id metadata.UUID, partition int32) error {
	return h.b.repl.AwaitISRTruncated(ctx, id, partition)
}

// NodeID is this broker's node ID.
func (b *Broker) NodeID() int32 { return b.cfg.NodeID }

// Engine is the broker's storage.
func (b *Broker) Engine() *engine.Engine { return b.engine }

// Metadata is the broker's metadata quorum.
func (b *Broker) Metadata() *raftmeta.Controller { return b.meta }

// Plugins are the broker's plugins, Config.Plugins.
func (b *Broker) Plugins() []any { return b.cfg.Plugins }

// internalTopics creates the internal topics plugins ask for
// (Host.EnsureTopic) and FindCoordinator locates coordinators in.
type internalTopics struct {
	log     *slog.Logger
	applied *appliedState
	meta    *raftmeta.Controller // set by the broker's Start
}

// ensure returns internal topic t from the applied image, creating it
// first if it does not exist.
func (it *internalTopics) ensure(ctx context.Context, t plugin.InternalTopic) (*metadata.Topic, error) {
	if cur := it.applied.get().Topics[t.Name]; cur != nil {
		return cur, nil
	}
	if it.meta.Image().Topics[t.Name] == nil {
		errs := it.meta.CreateTopics(ctx, []metadata.TopicSpec{{
			Name: t.Name, Partitions: t.Partitions, ReplicationFactor: t.ReplicationFactor,
			Configs: t.Configs, Internal: true,
		}}, false)
		switch err := errs[0]; {
		case err == nil:
			it.log.Info("created internal topic", "topic", t.Name, "partitions", t.Partitions)
		case !errors.Is(err, kerr.TopicAlreadyExists):
			return nil, fmt.Errorf("create internal topic %s: %w", t.Name, err)
		}
	}
	img, err := it.applied.await(ctx, func(img *metadata.Image) bool {
		cur := img.Topics[t.Name]
		return cur != nil && !slices.ContainsFunc(cur.Partitions, func(p metadata.Partition) bool { return p.Leader < 0 })
	})
	if err != nil {
		return nil, fmt.Errorf("internal topic %s is being created (%v): %w", t.Name, err, kerr.CoordinatorNotAvailable)
	}
	return img.Topics[t.Name], nil
}

// checkSession fails while broker nodeID, whose session s is, may have
// been fenced without knowing it: no heartbeat answered for timeout. A
// standalone broker (nil s) always passes.
func checkSession(s *raftmeta.Session, nodeID int32, timeout time.Duration) error {
	if s == nil || s.Current() {
		return nil
	}
	return fmt.Errorf("broker %d: no heartbeat answered by the controller within broker.session.timeout.ms (%v): it may be fenced, its leaderships elsewhere",
		nodeID, timeout)
}
