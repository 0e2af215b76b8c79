// Package engine is Tandem's log-structured storage core: partitions of
// Kafka record batches in append-only segment files, with their sparse
// offset index, leader epochs, producer state and aborted transactions in
// one Pebble instance; offsets, high watermarks, retention and
// compaction.
//
// The engine knows nothing of the wire protocol or of metadata: the server
// creates partitions as the metadata image says, and hands the engine the
// record batches exactly as clients sent them.
package engine

import (
	"time"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// TopicID is a Kafka topic ID (a UUID), the key under which a partition's
// data is stored so that a topic re-created with the same name never sees
// the old one's data. It is the same type as metadata.UUID
// (raftmeta/metadata).
type TopicID = uuid.UUID

// Origin says who is appending to a log. Validators use it: the mirror
// plugin lets nothing but its own fetcher write to a mirror partition,
// whatever the origin of the append.
type Origin int8

const (
	// OriginClient is a Produce request from a Kafka client.
	OriginClient Origin = iota
	// OriginCrossCluster is a copy of batches from another cluster's log
	// (cross-cluster replication, as a mirror's fetcher does): base
	// offsets and partition leader epochs are kept as they are.
	OriginCrossCluster
	// OriginReplica is an in-cluster follower copying from its leader.
	OriginReplica
	// OriginInternal is the broker itself: a coordinator writing its
	// internal topic.
	OriginInternal
	// OriginTxnMarker is a transaction marker written for a transaction
	// coordinator (WriteTxnMarkers: from this broker's coordinator or
	// from a client).
	OriginTxnMarker
	// OriginPluginControl is a plugin's own control writes, with offsets
	// assigned by the engine: markers, a producer-state barrier, copies
	// of records a truncation removes (the mirror plugin's failover
	// sequence and quarantine).
	OriginPluginControl
)

// Copies reports whether appends of this origin are copies of another
// log that keep their base offsets and partition leader epochs; the
// engine assigns and stamps them for the other origins.
func (o Origin) Copies() bool { return o == OriginCrossCluster || o == OriginReplica }

// ownWrite says whether an append from o is one of the broker's own
// writes, which the disk-space reserve is kept for: coordinators,
// transaction markers that end transactions, a plugin's control writes
// (a mirror's failover markers).
func (o Origin) ownWrite() bool {
	switch o {
	case OriginInternal, OriginTxnMarker, OriginPluginControl:
		return true
	}
	return false
}

// String names the origin in errors and logs; the two origins only the
// mirror plugin writes today read "mirror" and "mirror control".
func (o Origin) String() string {
	switch o {
	case OriginClient:
		return "client"
	case OriginCrossCluster:
		return "mirror"
	case OriginReplica:
		return "replica"
	case OriginInternal:
		return "internal"
	case OriginTxnMarker:
		return "transaction marker"
	case OriginPluginControl:
		return "mirror control"
	}
	return "unknown"
}

// AppendRequest is one append of record batches to one partition.
type AppendRequest struct {
	Topic     string
	TopicID   TopicID
	Partition int32
	Origin    Origin
	// Records holds one or more magic-2 record batches back to back,
	// exactly as received. For OriginClient and OriginInternal the engine
	// assigns offsets and stamps the partition leader epoch; for
	// OriginCrossCluster and OriginReplica the batches keep their base
	// offsets and epochs and must start at the log end offset. The engine
	// only reads Records: it stores a copy.
	Records []byte
	// Acks is the producer's acks (0, 1 or -1); it decides whether the
	// append waits for the write to be durable.
	Acks int16
}

// AppendValidator is called synchronously before batches enter a log, with
// no I/O. A non-nil error (ideally wrapping a *kerr.Error) rejects the whole
// append and leaves the log untouched.
type AppendValidator interface {
	ValidateAppend(req *AppendRequest) error
}

// AppendObserver is called after an append is durable and covered by the
// high watermark.
type AppendObserver interface {
	OnAppend(info AppendInfo)
}

// AppendInfo describes a completed append.
type AppendInfo struct {
	Topic         string
	TopicID       TopicID
	Partition     int32
	Origin        Origin
	BaseOffset    int64 // offset of the first record appended
	LastOffset    int64 // offset of the last record appended
	Batches       int   // number of record batches
	Bytes         int   // bytes appended
	HighWatermark int64
}

// AppendResult is what a Produce response reports for one partition.
type AppendResult struct {
	BaseOffset     int64
	LastOffset     int64
	LogAppendTime  int64 // -1 unless the topic uses LogAppendTime
	LogStartOffset int64
	// Duplicate is true when an idempotent producer retried batches that
	// were already appended; the offsets are the original ones.
	Duplicate bool
}

// Isolation is a fetch's isolation level.
type Isolation int8

const (
	ReadUncommitted Isolation = 0
	ReadCommitted   Isolation = 1
)

// FetchResult is a read from a partition.
type FetchResult struct {
	// Batches are stored record batches, unmodified, in offset order. The
	// first one may start before the requested offset (Kafka returns the
	// whole batch that contains it). The byte slices must not be modified.
	Batches          [][]byte
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	// AbortedTxns lists aborted transactions overlapping the returned
	// range (read_committed only).
	AbortedTxns []AbortedTxn
}

// AbortedTxn is one entry of the aborted-transaction index.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// Offsets are a partition's current positions.
type Offsets struct {
	LogStart      int64
	HighWatermark int64
	LastStable    int64
	LogEnd        int64
	LeaderEpoch   int32
}

// ProducerState is what DescribeProducers reports for one producer id.
type ProducerState struct {
	ProducerID            int64
	ProducerEpoch         int16
	LastSequence          int32
	LastTimestamp         int64
	CoordinatorEpoch      int32
	CurrentTxnStartOffset int64 // -1 when no transaction is open
}

// CleanupPolicy values of cleanup.policy.
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
)

// LogConfig is the part of a topic's configuration the engine enforces.
type LogConfig struct {
	RetentionMs     int64 // -1: unlimited
	RetentionBytes  int64 // -1: unlimited; per partition, as in Kafka
	MaxMessageBytes int32 // largest record batch accepted
	Compact         bool  // cleanup.policy contains compact
	Delete          bool  // cleanup.policy contains delete
	LogAppendTime   bool  // message.timestamp.type=LogAppendTime
	// MinCompactionLag is how old a record must be before compaction may
	// remove it (min.compaction.lag.ms).
	MinCompactionLag time.Duration
	// DeleteRetention is how long compaction keeps tombstones
	// (delete.retention.ms); 0 means Kafka's default of one day.
	DeleteRetention time.Duration
	// SegmentBytes is the size at which the active segment file is
	// rolled (segment.bytes); 0 means Kafka's default of 1 GiB.
	SegmentBytes int64
	// SegmentMs is the age at which the active segment is rolled
	// (segment.ms); 0 means Kafka's default of 7 days.
	SegmentMs int64
	// MinCleanableDirtyRatio is how much of a compacted log must have
	// been written since the last compaction before the next one
	// (min.cleanable.dirty.ratio); 0 means Kafka's default of 0.5.
	MinCleanableDirtyRatio float64
}

// DefaultLogConfig is Kafka's default topic configuration.
func DefaultLogConfig() LogConfig {
	return LogConfig{
		RetentionMs:            7 * 24 * 3600 * 1000,
		RetentionBytes:         -1,
		MaxMessageBytes:        1048588,
		Delete:                 true,
		DeleteRetention:        24 * time.Hour,
		SegmentBytes:           1 << 30,
		SegmentMs:              7 * 24 * 3600 * 1000,
		MinCleanableDirtyRatio: 0.5,
	}
}

func (c *LogConfig) segmentBytes() int64 {
	if c.SegmentBytes <= 0 {
		return 1 << 30
	}
	return c.SegmentBytes
}

func (c *LogConfig) segmentMs() int64 {
	if c.SegmentMs <= 0 {
		return 7 * 24 * 3600 * 1000
	}
	return c.SegmentMs
}

func (c *LogConfig) dirtyRatio() float64 {
	if c.MinCleanableDirtyRatio <= 0 {
		return 0.5
	}
	return c.MinCleanableDirtyRatio
}
