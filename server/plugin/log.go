package plugin

import (
	"context"

	"github.com/tandem-kafka/tandem/engine"
)

// Log is what a plugin may do to the log of a partition this broker
// hosts (Host.Partition): read it, append to it, and, for the mirror
// plugin that owns a mirror topic's partitions, move its ends. It is
// what the plugins use of *engine.Partition, which implements it, and
// no more: the broker alone sets a log's leader epoch, high watermark,
// configuration and replication state. The types in its signatures
// (AppendRequest, AppendResult, Offsets, FetchResult, LogConfig, Marker,
// Isolation) are still the engine's.
type Log interface {
	// Topic, TopicID and Index name the partition, for the appends a
	// plugin builds (engine.AppendRequest) and for its messages.
	Topic() string
	TopicID() engine.TopicID
	Index() int32

	// Offsets are the log's offsets and leader epoch now: where a plugin
	// starts reading, what a share-partition or a mirror's lag is
	// measured against.
	Offsets() engine.Offsets
	// Config is the log's configuration (a mirror's quarantine topic
	// takes its max.message.bytes).
	Config() engine.LogConfig
	// EpochAt is the leader epoch in force at offset (-1 if unknown): a
	// mirror's last mirrored epoch, a share-partition's epoch at its
	// start.
	EpochAt(offset int64) int32
	// EndOffsetForEpoch answers OffsetForLeaderEpoch (the largest epoch
	// <= epoch and where the next one starts): where a mirror's log
	// diverges from its source.
	EndOffsetForEpoch(epoch int32) (leaderEpoch int32, endOffset int64)

	// Fetch reads batches from offset up to the isolation's bound: a
	// share group's records, a coordinator loading its state, a mirror
	// looking for its barrier or copying removed records.
	Fetch(offset int64, maxBytes int, iso engine.Isolation) (engine.FetchResult, error)
	// OffsetForTimestamp and MaxTimestamp are ListOffsets' lookups by
	// time (a share group's share.auto.offset.reset by_duration, a
	// mirror's lag in time).
	OffsetForTimestamp(ts int64) (offset, timestamp int64, epoch int32, ok bool)
	MaxTimestamp() (offset, timestamp int64, epoch int32, ok bool)
	// Wait is closed the next time the high watermark advances: a share
	// fetch's long poll.
	Wait() <-chan struct{}
	// OpenTxn reports whether producer pid has a transaction open here
	// (a consumer group's transactional offset commits).
	OpenTxn(pid int64) (epoch int16, open bool)

	// Append appends and waits until durable (a coordinator's records,
	// a mirror's copies of removed records); Write starts an append and
	// tells at once whether it was refused, so that a mirror's fetcher
	// writes its next answer before the last is durable.
	Append(ctx context.Context, req *engine.AppendRequest) (engine.AppendResult, error)
	Write(ctx context.Context, req *engine.AppendRequest) (wait func() (engine.AppendResult, error), err error)
	// WriteTxnMarkers writes COMMIT or ABORT markers: the transaction
	// coordinator's, and a coordinator shard's (engine/coord).
	WriteTxnMarkers(ctx context.Context, markers ...engine.Marker) (int64, error)
	// AbortOpenTransactions and WriteProducerBarrier are a mirror
	// partition's failover: ABORT markers for the transactions its
	// source will never end, then the producer-state barrier.
	AbortOpenTransactions(ctx context.Context) ([]int64, error)
	WriteProducerBarrier(ctx context.Context) (int64, error)

	// Truncate and DeleteRecords move the log's end and start: a mirror
	// partition follows its source's (a diverged epoch, a source log
	// that ends earlier or starts later).
	Truncate(offset int64) error
	DeleteRecords(before int64) (int64, error)
}

var _ Log = (*engine.Partition)(nil)
