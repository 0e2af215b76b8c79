// Package statestore is the mirror partitions' state store over
// __mirror_state: which coordinator shard a partition's state lives on
// (Key, Leader), reading and writing it there or, from any other broker,
// remotely (Read, Write, ReadBatch, WriteBatch), the divergence manifest
// entries kept beside it (PendingEntry, WriteEntry, Manifest), and the
// coordinator's side of ReadMirrorStates and WriteMirrorStates
// (ServeRead, ServeWrite). The state machine and the records are
// mirrorstate's.
//
// A mirror partition's state lives on the broker that leads its
// __mirror_state partition (Key). Any other broker, the destination
// leader that runs the partition's fetcher included, reads and writes it
// there with ReadMirrorStates and WriteMirrorStates over the
// inter-broker listener (Coordinator.Send), as Kafka's brokers reach a
// group or transaction coordinator. A read-modify-write from another
// broker is not atomic across the two requests; the coordinator still
// refuses every transition the KIP does not allow
// (mirrorstate.State.CanMove), which is what keeps two writers apart: a
// fetcher's EPOCH_FENCING cannot overwrite a failover's STOPPING,
// whichever broker each runs on.
//
// It reaches the mirror plugin only through Coordinator, so that it does
// not import the plugin.
package statestore

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Coordinator is what the store needs of the plugin's coordinator over
// __mirror_state (plugin.Coordinator and its host).
type Coordinator interface {
	// Image is the latest metadata image, nil before the plugin starts.
	Image() *metadata.Image
	// PartitionFor is the __mirror_state partition a key routes to.
	PartitionFor(key string) int32
	// Runtime is the coordinator runtime holding this broker's shards.
	Runtime() *coord.Runtime
	// NodeID is this broker's ID.
	NodeID() int32
	// Send sends a request to another broker over the inter-broker
	// listener.
	Send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error)
}

// Store reads and writes mirror partition states, wherever their
// coordinator is.
type Store struct {
	c       Coordinator
	timeout time.Duration // mirror.request.timeout.ms
}

// New returns the store over c; timeout is mirror.request.timeout.ms,
// which bounds each request to another coordinator and, with a floor of
// a few seconds, the retries while a coordinator moves.
func New(c Coordinator, timeout time.Duration) *Store {
	return &Store{c: c, timeout: timeout}
}

// topicPartition names a partition of a mirror whose name is known.
type topicPartition = mirrorstate.TopicPartition

// do runs fn on the shard of key's partition once it has loaded, as
// plugin.Coordinator.Do.
func (store *Store) do(ctx context.Context, key string, fn func(sh *coord.Shard) error) error {
	return store.c.Runtime().Do(ctx, store.c.PartitionFor(key), fn)
}

// code is err's Kafka error code (plugin.ErrorCode), 0 for nil, and its
// message.
func code(err error) (int16, string) {
	if err == nil {
		return 0, ""
	}
	return plugin.ErrorCode(err), err.Error()
}
