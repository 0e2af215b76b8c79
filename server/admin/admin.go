// Package admin holds the broker's handlers of the admin and cluster
// metadata APIs: Metadata, DescribeCluster, DescribeTopicPartitions,
// topics and partitions (CreateTopics with KIP-1279's version 8,
// DeleteTopics, CreatePartitions), configs (DescribeConfigs,
// AlterConfigs, IncrementalAlterConfigs and the config layers they
// resolve through), leader elections and reassignments, ListOffsets,
// OffsetForLeaderEpoch, DeleteRecords, InitProducerId,
// DescribeProducers and DescribeLogDirs. Admin holds what they take of
// the broker; the broker registers them in its API table.
package admin

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Admin serves the admin APIs for one broker. The broker makes it in New
// and sets Meta and Engine in Start, once they are open and before any
// request can arrive.
type Admin struct {
	NodeID  int32
	DataDir string       // the one log dir DescribeLogDirs answers
	Log     *slog.Logger // the broker's
	Plugins []any        // the broker's plugins, for their hooks
	// Static is the broker's properties as given, the static layer of
	// every config (DescribeConfigs).
	Static map[string]string
	// The broker properties the handlers act on (server.Props).
	AutoCreateTopics         bool
	NumPartitions            int32
	DefaultReplicationFactor int16
	DeleteTopicEnable        bool
	PartitionLimits          raftmeta.PartitionLimits

	Meta   *raftmeta.Controller // set by the broker's Start
	Engine *engine.Engine       // set by the broker's Start
	// Image is the metadata image the broker applied (which may lag
	// Meta's latest).
	Image func() *metadata.Image
	// WaitApplied waits until the broker applied the image of index.
	WaitApplied func(ctx context.Context, index uint64) error
	// LedPartition is the broker's leadership check of partition p of
	// t: the engine's partition if this broker leads it, else the error
	// (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER).
	LedPartition func(t *metadata.Topic, p int32) (*engine.Partition, metadata.Partition, *kerr.Error)

	pids metadata.ProducerIDs // for idempotent producers
}

// adminErrCode returns the Kafka error code of err and a message for
// ErrorMessage fields (plugin.ErrorCode, plugin.ErrorMessage).
func adminErrCode(err error) (int16, *string) {
	return plugin.ErrorCode(err), plugin.ErrorMessage(err)
}

func cfgStr(s string) *string { return &s }
