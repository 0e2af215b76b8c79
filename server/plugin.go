package server

import (
	"context"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
)

// Plugins are values passed in Config.Plugins. A plugin implements only the
// hook interfaces it needs; the broker finds them by type assertion, the
// way franz-go's client finds its hooks. The engine's hooks
// (engine.AppendValidator, engine.AppendObserver) are found the same way.

// LeaderChange says this broker gained or lost leadership of a partition.
type LeaderChange struct {
	Topic       string
	TopicID     engine.TopicID
	Partition   int32
	Leader      bool  // true: this broker now leads the partition
	LeaderEpoch int32 // the epoch of the new leadership (or of the one lost)
}

// LeaderObserver is told of leadership changes, in order per partition.
// Treat each call as the partition's current state, not as an event to
// count: coordinators load or drop their state, fetchers start or stop.
type LeaderObserver interface {
	OnLeaderChange(change LeaderChange)
}

// MetadataObserver is called after the metadata image changed, never from
// inside the raft FSM. Deltas may be coalesced: an observer that falls
// behind gets one delta covering everything it missed.
type MetadataObserver interface {
	OnMetadataUpdate(delta raftmeta.Delta, image *raftmeta.Image)
}

// Lifecycle plugins are started after the broker listens and stopped
// before it closes its storage.
type Lifecycle interface {
	Start(ctx context.Context, host Host) error
	Stop(ctx context.Context) error
}

// Host is what a plugin may use of the broker.
type Host interface {
	NodeID() int32
	Engine() *engine.Engine
	Metadata() *raftmeta.Controller
	// Plugins are the broker's plugins (Config.Plugins): a plugin finds
	// another's registered interface (GroupOffsets, ...) by type
	// assertion, without importing it.
	Plugins() []any
}

// InternalTopic is an internal topic a plugin keeps its state in, as the
// broker creates it on first use.
type InternalTopic struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
}

// FindCoordinator key types.
const (
	CoordinatorGroup       int8 = 0
	CoordinatorTransaction int8 = 1
	CoordinatorMirror      int8 = 2
)

// CoordinatorLocator plugins run coordinators on the partitions of an
// internal topic. The broker answers FindCoordinator with the leader of
// the partition LocateCoordinator names (ok false: the plugin does not
// serve keyType), creating the topic on first use. FindCoordinator is
// advertised only when some plugin implements this.
type CoordinatorLocator interface {
	LocateCoordinator(keyType int8, key string) (topic InternalTopic, partition int32, ok bool)
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// CommittedOffset is a group's committed position in a partition.
type CommittedOffset struct {
	Offset      int64
	LeaderEpoch int32 // -1: unknown
	Metadata    string
}

// GroupOffsets is registered by the consumer-groups plugin so that other
// plugins (mirror offset sync, transactional offset commits) can read and
// write committed offsets without knowing how they are stored. States are
// Kafka's names: "Empty", "PreparingRebalance", "CompletingRebalance",
// "Stable", "Dead" (a group that does not exist). Errors wrap kerr codes
// (NOT_COORDINATOR when this broker does not coordinate the group).
type GroupOffsets interface {
	CommittedOffsets(ctx context.Context, group string) (map[TopicPartition]CommittedOffset, string, error)
	// CommitOffsets commits as an admin or simple consumer does
	// (generation -1): refused with UNKNOWN_MEMBER_ID unless the group
	// has no active members.
	CommitOffsets(ctx context.Context, group string, offsets map[TopicPartition]CommittedOffset) error
	GroupState(ctx context.Context, group string) (string, error)
}
