package plugin

import (
	"context"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// ReplicaConvergence is implemented by a Host that replicates partitions
// across brokers (the server's Host); a plugin finds it with a type
// assertion on its Host, and without it has nothing to wait for.
type ReplicaConvergence interface {
	// AwaitISRTruncated waits until every in-sync follower of a
	// partition this broker leads has fetched, since the call, with a
	// log that matches the leader's: after the leader truncated its log
	// (the mirror's LME truncation), each follower that held what was
	// truncated has truncated it too. A follower that stops fetching
	// leaves the ISR after replica.lag.time.max.ms, which also ends the
	// wait. It returns NOT_LEADER_OR_FOLLOWER if this broker does not
	// lead the partition, or ctx's error. A partition with one replica
	// returns at once.
	AwaitISRTruncated(ctx context.Context, topicID metadata.UUID, partition int32) error
}
