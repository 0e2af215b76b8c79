package plugin

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
)

// Share groups (KIP-932) span two plugins, as they span Kafka's group
// coordinator and its share coordinator: the consumer-groups plugin keeps
// their membership and assignment (records in __consumer_offsets) and
// offers ShareGroupCoordinator; the share-groups plugin serves the share
// APIs, keeps the state of each share-partition (__share_group_state) on
// the partition's leader and offers ShareStateStore,
// ShareMemberListener and ShareGroupOffsets. Each finds the other with
// Find; the share-groups plugin needs the consumer-groups plugin.

// ShareGroupConfig is how a share group's partitions behave: the group's
// configs (the GROUP config resource) over the broker's group.share.*
// defaults.
type ShareGroupConfig struct {
	RecordLock     time.Duration // share.record.lock.duration.ms: how long an acquired record stays locked
	DeliveryLimit  int           // share.delivery.count.limit: deliveries before a record is archived
	MaxRecordLocks int           // group.share.partition.max.record.locks: in-flight records per share-partition
	// AutoOffsetReset is share.auto.offset.reset: "latest", "earliest"
	// or "by_duration"; ResetDuration goes with "by_duration".
	AutoOffsetReset string
	ResetDuration   time.Duration
	ReadCommitted   bool // share.isolation.level=read_committed
}

// SharePartition names a partition of a share group's topic.
type SharePartition struct {
	TopicID   engine.TopicID
	Topic     string
	Partition int32
}

// ShareGroupCoordinator is offered by the consumer-groups plugin. Its
// methods may block until ctx ends; errors wrap kerr codes.
type ShareGroupCoordinator interface {
	// ShareGroupHeartbeat and ShareGroupDescribe serve those APIs
	// (ACLs included).
	ShareGroupHeartbeat(ctx context.Context, rc *RequestContext, req *kmsg.ShareGroupHeartbeatRequest) *kmsg.ShareGroupHeartbeatResponse
	ShareGroupDescribe(ctx context.Context, rc *RequestContext, req *kmsg.ShareGroupDescribeRequest) *kmsg.ShareGroupDescribeResponse
	// ShareGroupConfig is the group's configuration. It does not block.
	ShareGroupConfig(group string) ShareGroupConfig
	// ShareGroupPartitions is the group's state ("Empty", "Stable",
	// "Dead" for a group that does not exist) and the partitions whose
	// share state was initialized. A group of another type is
	// GROUP_ID_NOT_FOUND.
	ShareGroupPartitions(ctx context.Context, group string) (state string, parts []SharePartition, err error)
	// SetShareGroupPartitions records partitions as initialized (add) or
	// forgets them (remove), creating the group if it does not exist.
	// Unless the group has no members it fails with NON_EMPTY_GROUP.
	SetShareGroupPartitions(ctx context.Context, group string, add, remove []SharePartition) error
}

// ShareState is a share-partition's durable state, as the share-group
// state APIs (ReadShareGroupState) return it.
type ShareState struct {
	StateEpoch  int32
	LeaderEpoch int32
	StartOffset int64 // -1: not initialized (share.auto.offset.reset decides)
	// DoneAbove counts the offsets from StartOffset on that are
	// acknowledged or archived (for the lag).
	DoneAbove int64
}

// ShareStateStore is offered by the share-groups plugin: the durable
// share-partition state in __share_group_state, for the group
// coordinator's admin APIs and group deletion. Methods may block until
// ctx ends; errors wrap kerr codes.
type ShareStateStore interface {
	// InitializeShareState sets start offsets (a new state epoch,
	// nothing in flight); -1 leaves the start to share.auto.offset.reset.
	InitializeShareState(ctx context.Context, group string, starts map[SharePartition]int64) error
	// ReadShareStates returns the state of each partition; a partition
	// without state has StartOffset -1.
	ReadShareStates(ctx context.Context, group string, parts []SharePartition) (map[SharePartition]ShareState, error)
	// DeleteShareStates removes the state of each partition.
	DeleteShareStates(ctx context.Context, group string, parts []SharePartition) error
}

// ShareMemberListener is offered by the share-groups plugin: the group
// coordinator tells it when a member left a share group or was removed,
// so that its share sessions end and the records it acquired are
// released at once. It does not block.
type ShareMemberListener interface {
	ShareMemberLeft(group, memberID string)
}

// ShareGroupOffsets is offered by the share-groups plugin so that other
// plugins (the mirror's metadata sync) can read and set share groups'
// progress as they do consumer groups' (GroupOffsets). Offsets are the
// share-partition start offsets; a CommittedOffset's LeaderEpoch is that
// of the record before the offset (-1 unknown) and Metadata is empty.
// States are "Empty", "Stable" and "Dead". Methods may block until ctx
// ends; errors wrap kerr codes.
type ShareGroupOffsets interface {
	ShareGroupStartOffsets(ctx context.Context, group string) (map[TopicPartition]CommittedOffset, string, error)
	// AlterShareGroupStartOffsets sets start offsets as
	// AlterShareGroupOffsets does: refused with NON_EMPTY_GROUP unless
	// the group has no members.
	AlterShareGroupStartOffsets(ctx context.Context, group string, offsets map[TopicPartition]int64) error
}
