package plugin

import (
	"context"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Capabilities are what plugins offer each other, without importing each
// other: a plugin implements the interface, and another finds it among
// Host.Plugins with Find or All. A missing capability means the plugin
// that offers it is not in this build, which the finder must handle.
// They are called from the finder's goroutines, once both plugins have
// started.

// Find returns the first of plugins (Host.Plugins) that implements T.
func Find[T any](plugins []any) (T, bool) {
	for _, p := range plugins {
		if v, ok := p.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// All returns every one of plugins (Host.Plugins) that implements T, in
// their order.
func All[T any](plugins []any) []T {
	var out []T
	for _, p := range plugins {
		if v, ok := p.(T); ok {
			out = append(out, v)
		}
	}
	return out
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

// GroupOffsets is offered by the consumer-groups plugin, so that other
// plugins (mirror offset sync, transactions) can read and write committed
// offsets without knowing how they are stored. States are Kafka's names:
// "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
// (a group that does not exist). Errors wrap kerr codes (NOT_COORDINATOR
// when this broker does not coordinate the group). The methods may block
// until ctx ends, except OffsetsPartition.
type GroupOffsets interface {
	CommittedOffsets(ctx context.Context, group string) (map[TopicPartition]CommittedOffset, string, error)
	// CommitOffsets commits as an admin or simple consumer does
	// (generation -1): refused with UNKNOWN_MEMBER_ID unless the group
	// has no active members.
	CommitOffsets(ctx context.Context, group string, offsets map[TopicPartition]CommittedOffset) error
	GroupState(ctx context.Context, group string) (string, error)
	// OffsetsPartition is the partition of the internal topic that holds
	// the group's offsets, where its transactional offset commits go
	// (AddOffsetsToTxn adds it to a transaction).
	OffsetsPartition(group string) TopicPartition
}

// TxnMarkerWriter is offered by plugins whose internal topic holds
// transactional records (the consumer-groups plugin: TxnOffsetCommit in
// its offsets topic). The transaction coordinator hands them the markers
// of their partitions instead of writing the markers itself, so that
// they apply or drop their pending state as the marker is written.
type TxnMarkerWriter interface {
	// WriteTxnMarker writes m to tp; handled is false for a topic the
	// plugin does not own. It may block until ctx ends.
	WriteTxnMarker(ctx context.Context, tp TopicPartition, m engine.Marker) (handled bool, err error)
	// OpenTxnPartitions lists the partitions of the plugin's topic led
	// here in which producer pid has a transaction open, so that ending
	// the transaction writes their markers too. It does not block.
	OpenTxnPartitions(pid int64) []TopicPartition
}

// ACLStore is offered by the security plugin so that other plugins (the
// mirror's ACL sync) can list and apply ACL bindings. The writes may
// block until ctx ends.
type ACLStore interface {
	DescribeACLs(filter metadata.ACLFilter) []metadata.ACL
	CreateACLs(ctx context.Context, acls []metadata.ACL) error
	// DeleteACLs removes every binding a filter matches and returns them.
	DeleteACLs(ctx context.Context, filters []metadata.ACLFilter) ([]metadata.ACL, error)
}
