package plugin

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Coordinator is the wiring that every plugin coordinating over an
// internal topic shares (Kafka's group and transaction coordinators, the
// mirror coordinator): the partitioned runtime of engine/coord, the
// internal topic's spec, leadership of its partitions, FindCoordinator,
// the routing of keys to partitions over the topic's real partition
// count, and the Host.
//
// Embed a *Coordinator in the plugin: its Start, Stop, OnLeaderChange and
// LocateCoordinator make the plugin a Lifecycle, a LeaderObserver and a
// CoordinatorLocator. A plugin that does more in Start or Stop defines
// its own and calls these.
type Coordinator struct {
	err          error
	keyType      int8
	topic        InternalTopic
	brokerMinISR int
	rt           *coord.Runtime
	host         atomic.Pointer[Host] // nil until Start
}

// CoordinatorConfig configures a Coordinator.
type CoordinatorConfig struct {
	// KeyType is the FindCoordinator key type served (CoordinatorGroup,
	// CoordinatorTransaction, CoordinatorMirror).
	KeyType int8
	// Topic is the internal topic as the broker creates it on first use,
	// compacted (cleanup.policy=compact, over Topic.Configs). Keys are
	// routed over Topic.Partitions only until the topic exists, then over
	// the count it has, which an earlier run with other properties may
	// have chosen.
	Topic InternalTopic
	// New returns the empty state machine of a partition's shard.
	// BrokerMinISR is the broker's min.insync.replicas, which the topic
	// follows when Topic.Configs does not set its own: it is capped at
	// the replication factor like the topic's own (see ForCluster).
	BrokerMinISR int
	New          func(partition int32) coord.StateMachine
	Logger       *slog.Logger
	// Err, a bad property of the plugin, makes Start fail, so that the
	// broker refuses to run with it.
	Err error
}

// NewCoordinator returns a coordinator that serves nothing until Start.
func NewCoordinator(cfg CoordinatorConfig) *Coordinator {
	topic := cfg.Topic
	topic.Configs = maps.Clone(topic.Configs)
	if topic.Configs == nil {
		topic.Configs = map[string]string{}
	}
	topic.Configs["cleanup.policy"] = "compact" // the state is the latest record per key
	return &Coordinator{err: cfg.Err, keyType: cfg.KeyType, topic: topic, brokerMinISR: cfg.BrokerMinISR, rt: coord.New(coord.Config{
		Topic: topic.Name, Partitions: topic.Partitions, New: cfg.New, Logger: cfg.Logger,
	})}
}

// Start implements Lifecycle: the runtime serves shards from now on.
func (c *Coordinator) Start(_ context.Context, host Host) error {
	if c.err != nil {
		return c.err
	}
	c.host.Store(&host)
	c.rt.Start(coordLogs{host}, host, host.Contain)
	return nil
}

// coordLogs is the host's partitions as the runtime takes them.
type coordLogs struct{ host Host }

func (l coordLogs) Partition(id engine.TopicID, partition int32) coord.Log {
	if p := l.host.Partition(id, partition); p != nil {
		return p
	}
	return nil
}

// Stop implements Lifecycle: every shard is unloaded and every goroutine
// of the runtime has ended when it returns.
func (c *Coordinator) Stop(context.Context) error {
	c.rt.Stop()
	return nil
}

// OnLeaderChange implements LeaderObserver for the partitions of the
// internal topic: their shards load or unload.
func (c *Coordinator) OnLeaderChange(ch LeaderChange) {
	if ch.Topic == c.topic.Name {
		c.rt.SetLeader(ch.TopicID, ch.Partition, ch.Leader, ch.LeaderEpoch)
	}
}

// LocateCoordinator implements CoordinatorLocator for the key type served.
func (c *Coordinator) LocateCoordinator(keyType int8, key string) (InternalTopic, int32, bool) {
	if keyType != c.keyType {
		return InternalTopic{}, 0, false
	}
	return c.Topic(), c.PartitionFor(key), true
}

// Topic is the internal topic's spec as it would be created now: with
// its replication factor and min.insync.replicas capped at the live
// brokers (ForCluster).
func (c *Coordinator) Topic() InternalTopic {
	return c.topic.ForCluster(c.Image(), c.brokerMinISR)
}

// ForCluster returns t as it is to be created on the cluster img
// describes: its replication factor capped at the live (registered,
// unfenced) brokers, at least 1, so that a one- or two-node cluster can
// create it where Kafka would refuse to (Kafka's default of 3 is kept
// for larger clusters); and its min.insync.replicas (its own config, or
// else brokerMinISR, the broker's default it would follow, if above 1)
// capped at that replication factor, so that every replica being in
// sync is always enough to write. The cap applies at creation only: a
// topic that exists keeps what it was created with. A nil img leaves t
// as it is.
func (t InternalTopic) ForCluster(img *metadata.Image, brokerMinISR int) InternalTopic {
	if img == nil {
		return t
	}
	live := 0
	for _, b := range img.Brokers {
		if b.Live() {
			live++
		}
	}
	t.ReplicationFactor = max(1, min(t.ReplicationFactor, int16(min(live, math.MaxInt16))))
	minISR := brokerMinISR
	if v, ok := t.Configs["min.insync.replicas"]; ok {
		minISR, _ = strconv.Atoi(v)
	}
	if capped := min(minISR, int(t.ReplicationFactor)); capped != minISR || t.Configs["min.insync.replicas"] != "" {
		t.Configs = maps.Clone(t.Configs)
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		t.Configs["min.insync.replicas"] = strconv.Itoa(max(capped, 1))
	}
	return t
}

// Host is the broker, nil before Start.
func (c *Coordinator) Host() Host {
	if h := c.host.Load(); h != nil {
		return *h
	}
	return nil
}

// Contain runs f with the host's Contain (a panic fails the plugin, not
// the process); before Start it runs f as it is.
func (c *Coordinator) Contain(f func()) {
	if h := c.Host(); h != nil {
		h.Contain(f)
		return
	}
	f()
}

// Image is the latest metadata image, nil before Start.
func (c *Coordinator) Image() *metadata.Image {
	if h := c.Host(); h != nil {
		return h.Metadata().Image()
	}
	return nil
}

// PartitionFor routes a key to its partition of the internal topic as
// Kafka does (coord.PartitionFor), over the partition count the topic
// really has.
func (c *Coordinator) PartitionFor(key string) int32 {
	n := c.topic.Partitions
	if img := c.Image(); img != nil {
		if t := img.Topics[c.topic.Name]; t != nil && len(t.Partitions) > 0 {
			n = int32(len(t.Partitions))
		}
	}
	return coord.PartitionFor(key, n)
}

// Do runs fn on the shard of key's partition once it has loaded
// (coord.Runtime.Do). Its errors are the codes a coordinator answers
// with: COORDINATOR_NOT_AVAILABLE before Start and after Stop,
// NOT_COORDINATOR where this broker does not lead the partition,
// COORDINATOR_LOAD_IN_PROGRESS if ctx ends while the shard loads.
func (c *Coordinator) Do(ctx context.Context, key string, fn func(sh *coord.Shard) error) error {
	return c.rt.Do(ctx, c.PartitionFor(key), fn)
}

// Runtime is the coordinator runtime, for what goes by partition rather
// than by key (listing shards, markers).
func (c *Coordinator) Runtime() *coord.Runtime { return c.rt }
