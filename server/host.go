package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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
// and is the plugins' Host (pluginHost: the broker, knowing which plugin
// it serves).

var (
	_ plugin.Host               = pluginHost{}
	_ plugin.ReplicaConvergence = (*Broker)(nil)
)

// RequestContext is what a handler knows of its request; handlers of the
// broker and of plugins share it.
type RequestContext = plugin.RequestContext

// pluginHost is the Host a plugin is started with: the broker, knowing
// which plugin it serves, so that Contain can blame the right one.
type pluginHost struct {
	*Broker
	name string
}

// Contain runs f, work of the plugin outside any request, so that a
// panic in it fails the plugin rather than ending the broker.
func (h pluginHost) Contain(f func()) { h.plugins.contain(h.name, "background work", f) }

// NodeID implements plugin.Host.
func (b *Broker) NodeID() int32 { return b.cfg.NodeID }

// Engine is the broker's storage.
func (b *Broker) Engine() *engine.Engine { return b.engine }

// Metadata is the broker's metadata quorum.
func (b *Broker) Metadata() *raftmeta.Controller { return b.meta }

// Partition implements plugin.Host.
func (h pluginHost) Partition(id engine.TopicID, p int32) *engine.Partition {
	return h.engine.Partition(id, p)
}

// Metadata implements plugin.Host.
func (h pluginHost) Metadata() plugin.Metadata { return h.meta }

// Plugins implements plugin.Host.
func (b *Broker) Plugins() []any { return b.cfg.Plugins }

// MetricsSet implements plugin.Host: the broker's metrics set, served at
// /metrics.
func (b *Broker) MetricsSet() *prom.Set { return b.metrics }

// Send implements plugin.Host: it sends req to broker node over the
// inter-broker listener, authenticated as this broker, and returns its
// response. The connection is kept per peer address for later requests;
// a peer that re-registers on another address gets a new one.
func (b *Broker) Send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	br, ok := b.meta.Image().Brokers[node]
	if !ok {
		return nil, fmt.Errorf("broker %d is not registered: %w", node, kerr.BrokerNotAvailable)
	}
	addr := fmt.Sprintf("%s:%d", br.Host, br.Port)
	b.peers.mu.Lock()
	if b.peers.closed {
		b.peers.mu.Unlock()
		return nil, fmt.Errorf("broker is closing: %w", kerr.BrokerNotAvailable)
	}
	p := b.peers.clients[node]
	if p != nil && p.addr != addr {
		p.cl.Close()
		p = nil
	}
	if p == nil {
		cl, err := b.links.client(addr, kgo.MaxVersions(sendVersions(b.apis)))
		if err != nil {
			b.peers.mu.Unlock()
			return nil, fmt.Errorf("client for broker %d: %w", node, err)
		}
		p = &peerClient{addr: addr, cl: cl}
		if b.peers.clients == nil {
			b.peers.clients = map[int32]*peerClient{}
		}
		b.peers.clients[node] = p
	}
	b.peers.mu.Unlock()
	resp, err := p.cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		b.links.Failed(node, addr, err)
		return nil, fmt.Errorf("%s to broker %d: %w", kmsg.NameForKey(req.Key()), node, err)
	}
	b.links.OK(node)
	return resp, nil
}

// EnsureTopic implements plugin.Host: it returns internal topic t from
// the applied image, creating it first if it does not exist.
func (b *Broker) EnsureTopic(ctx context.Context, t plugin.InternalTopic) (*metadata.Topic, error) {
	if cur := b.applied.get().Topics[t.Name]; cur != nil {
		return cur, nil
	}
	if b.meta.Image().Topics[t.Name] == nil {
		errs := b.meta.CreateTopics(ctx, []raftmeta.TopicSpec{{
			Name: t.Name, Partitions: t.Partitions, ReplicationFactor: t.ReplicationFactor,
			Configs: t.Configs, Internal: true,
		}}, false)
		switch err := errs[0]; {
		case err == nil:
			b.log.Info("created internal topic", "topic", t.Name, "partitions", t.Partitions)
		case !errors.Is(err, kerr.TopicAlreadyExists):
			return nil, fmt.Errorf("create internal topic %s: %w", t.Name, err)
		}
	}
	img, err := b.applied.await(ctx, func(img *metadata.Image) bool {
		cur := img.Topics[t.Name]
		return cur != nil && !slices.ContainsFunc(cur.Partitions, func(p metadata.Partition) bool { return p.Leader < 0 })
	})
	if err != nil {
		return nil, fmt.Errorf("internal topic %s is being created (%v): %w", t.Name, err, kerr.CoordinatorNotAvailable)
	}
	return img.Topics[t.Name], nil
}

// CheckWritable implements plugin.Host (and coord.Replicas): the checks
// of an acks=all produce before its append, against the applied image.
func (b *Broker) CheckWritable(id engine.TopicID, p int32) (int32, error) {
	t := b.applied.get().TopicsByID[id]
	_, part, kerrErr := b.produce.ledPartition(t, p)
	switch {
	case kerrErr == kerr.UnknownTopicOrPartition:
		return -1, fmt.Errorf("partition %d of topic %s: %w", p, id, kerrErr)
	case kerrErr != nil:
		return -1, fmt.Errorf("%s-%d is led by broker %d: %w", t.Name, p, part.Leader, kerrErr)
	}
	if err := b.repl.CheckMinISR(t, p, part); err != nil {
		return -1, err
	}
	return part.LeaderEpoch, nil
}

// CheckSession implements plugin.Host (and coord.Replicas).
func (b *Broker) CheckSession() error {
	if b.session == nil || b.session.Current() {
		return nil
	}
	return fmt.Errorf("broker %d: no heartbeat answered by the controller within broker.session.timeout.ms (%v): it may be fenced, its leaderships elsewhere",
		b.cfg.NodeID, b.props.Cluster.SessionTimeout)
}

// AwaitReplicated implements plugin.Host (and coord.Replicas): the wait
// of an acks=all produce after its append.
func (b *Broker) AwaitReplicated(ctx context.Context, id engine.TopicID, p int32, leaderEpoch int32, last int64, timeout time.Duration) error {
	t := b.applied.get().TopicsByID[id]
	ep := b.engine.Partition(id, p)
	if t == nil || ep == nil {
		return fmt.Errorf("partition %d of topic %s is gone: %w", p, id, kerr.UnknownTopicOrPartition)
	}
	return b.repl.AwaitReplicated(ctx, t, p, leaderEpoch, ep, last, timeout)
}

// AwaitISRTruncated implements plugin.ReplicaConvergence: it waits until
// every follower in the ISR of a partition this broker leads has fetched,
// since the call, with a log that matches the leader's
// (replication.Manager.AwaitISRTruncated).
func (b *Broker) AwaitISRTruncated(ctx context.Context, id metadata.UUID, partition int32) error {
	return b.repl.AwaitISRTruncated(ctx, id, partition)
}
