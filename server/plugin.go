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
}
