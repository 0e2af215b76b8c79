package server

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
)

// Plugins are values passed in Config.Plugins. A plugin implements only the
// hook interfaces it needs; the broker finds them by type assertion, the
// way franz-go's client finds its hooks. The engine's hooks
// (engine.AppendValidator, engine.AppendObserver) are found the same way.

// ErrorCode is the Kafka error code of err for a response field: a kerr
// error (wrapped or not) keeps its code, any other error is
// UNKNOWN_SERVER_ERROR, and nil is 0. Handlers and plugins share it.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

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

// PropsOwner plugins read broker properties of their own (mirror.*,
// transaction.*, offsets.*, group.*, ...): the broker does not log the
// keys they own as unknown.
type PropsOwner interface {
	OwnsProp(key string) bool
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

// TxnMarkerWriter is registered by plugins whose internal topic holds
// transactional records (the consumer-groups plugin: TxnOffsetCommit in
// __consumer_offsets). The transaction coordinator hands them the markers
// of their partitions instead of writing the markers itself, so that they
// apply or drop their pending state as the marker is written. handled is
// false for a topic the plugin does not own.
type TxnMarkerWriter interface {
	WriteTxnMarker(ctx context.Context, tp TopicPartition, m engine.Marker) (handled bool, err error)
}

// TxnCoordinator is registered by the transactions plugin. InitProducerId
// with a transactional id goes to it; Produce asks it whether a
// transactional batch's partition is part of the producer's transaction
// (KIP-890's verification) before appending the first batch of a
// transaction. Errors wrap kerr codes.
type TxnCoordinator interface {
	InitTransactionalProducerID(ctx context.Context, rc *RequestContext, req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse
	VerifyTxnPartition(ctx context.Context, txnID string, pid int64, epoch int16, tp TopicPartition) error
}

// TopicChange is a change to a topic that a TopicGuard may refuse.
type TopicChange struct {
	Topic string
	Op    TopicOp
	Keys  []string // the config keys an OpAlterConfigs sets or deletes
}

// TopicOp is what a TopicChange does.
type TopicOp int8

const (
	OpWrite            TopicOp = iota // a client's records: a transactional produce, AddPartitionsToTxn
	OpTxnMarkers                      // transaction markers: a coordinator ending a transaction, or WriteTxnMarkers
	OpDeleteRecords                   // DeleteRecords
	OpCreatePartitions                // CreatePartitions
	OpDeleteTopic                     // DeleteTopics
	OpAlterConfigs                    // AlterConfigs, IncrementalAlterConfigs
)

// TopicGuard plugins own some topics' contents and refuse changes to them
// from anyone else (the mirror plugin: the only writer of a mirror topic
// is its mirror fetcher, and only the mirror APIs change it). The broker's
// admin handlers and the transaction coordinator ask CheckTopicChange
// before they change anything; appends are checked by
// engine.AppendValidator whatever their origin. Called on request
// goroutines; no I/O. Errors wrap a kerr code.
type TopicGuard interface {
	CheckTopicChange(c TopicChange) error
}

// CheckTopicChange asks each TopicGuard among plugins (Config.Plugins, or
// Host.Plugins in a plugin); the first refusal wins.
func CheckTopicChange(plugins []any, c TopicChange) error {
	for _, p := range plugins {
		if g, ok := p.(TopicGuard); ok {
			if err := g.CheckTopicChange(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// ConfigResourceHandler plugins serve DescribeConfigs and
// IncrementalAlterConfigs for a config resource type the broker does not
// know itself (the mirror plugin: MIRROR, 64). Errors wrap kerr codes.
type ConfigResourceHandler interface {
	ConfigResourceType() kmsg.ConfigResourceType
	DescribeConfigResource(ctx context.Context, rc *RequestContext, name string, keys []string) ([]kmsg.DescribeConfigsResponseResourceConfig, error)
	AlterConfigResource(ctx context.Context, rc *RequestContext, name string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) error
}
