package plugin

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Host is what a plugin may use of the broker (the server gives each
// plugin its own), from Lifecycle.Start until Stop returns. It is safe for concurrent
// use.
type Host interface {
	// NodeID is this broker's node ID.
	NodeID() int32
	// Partition is this broker's log of partition p of topic id, as
	// much of it as a plugin may use (Log), nil when the broker does
	// not host it. A partition this broker
	// hosts is there once LeaderObserver heard of it, or an image that
	// has it was passed to MetadataObserver.
	Partition(id engine.TopicID, p int32) Log
	// Metadata is the metadata quorum: its latest committed image
	// (possibly ahead of what the broker applied), and the controller's
	// decisions, which write metadata through the controller.
	Metadata() Metadata
	// MetricsSet is the broker's metrics set, served at /metrics: a
	// plugin registers its metrics there, so that each broker of a
	// process has its own, and describes their families (prom.Family:
	// type and help), which docs/metrics.md lists.
	MetricsSet() *prom.Set
	// EnsureTopic returns internal topic t as the broker serves it (in
	// the applied image). A topic that does not exist yet is created,
	// and EnsureTopic then waits until every partition of it has a
	// leader, or ctx ends: COORDINATOR_NOT_AVAILABLE while it is being
	// created. The wait needs leadership to be reconciled (step 3 of the
	// order): do not call it from Start.
	EnsureTopic(ctx context.Context, t InternalTopic) (*metadata.Topic, error)
	// Send sends req to broker node (a node ID of the image's Brokers)
	// over the inter-broker listener, authenticated as this broker, as
	// Kafka's brokers send WriteTxnMarkers or the mirror state APIs to
	// each other. Errors are the connection's or the request's, not the
	// response's error codes.
	Send(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error)
	// CheckWritable is the check of an acks=all append before it is
	// made to partition p of topic id: this broker leads the partition
	// in its applied image (NOT_LEADER_OR_FOLLOWER, or
	// UNKNOWN_TOPIC_OR_PARTITION) and its ISR has min.insync.replicas
	// members (NOT_ENOUGH_REPLICAS). It returns the leader epoch to
	// pass to AwaitReplicated once the records are appended.
	CheckWritable(id engine.TopicID, p int32) (leaderEpoch int32, err error)
	// AwaitReplicated is the rest of acks=all: it returns once the high
	// watermark of partition p covers offset last, which this broker
	// appended as leader in leaderEpoch. NOT_LEADER_OR_FOLLOWER if
	// leadership moved meanwhile, NOT_ENOUGH_REPLICAS_AFTER_APPEND if
	// the ISR shrank below min.insync.replicas, REQUEST_TIMED_OUT after
	// timeout (0: 30 s), or ctx's error.
	AwaitReplicated(ctx context.Context, id engine.TopicID, p int32, leaderEpoch int32, last int64, timeout time.Duration) error
	// CheckSession returns an error while this broker's session with
	// the controller has lapsed: no heartbeat it sent within
	// broker.session.timeout.ms was answered, so the controller may have
	// fenced it and moved its leaderships where it cannot see them. What
	// a plugin serves from its own state (a coordinator's) may then be
	// older than what the new leaders acknowledged; coordinators answer
	// COORDINATOR_NOT_AVAILABLE instead (engine/coord does it for them).
	// Always nil on a standalone broker.
	CheckSession() error
	// Contain runs f, work of the plugin outside any request (the body
	// of a goroutine it starts, a timer's callback), so that a panic in
	// f fails the plugin instead of ending the process: the broker stops
	// calling the plugin, its requests answer UNKNOWN_SERVER_ERROR with
	// the reason, and the broker reports unhealthy until restarted. A
	// plugin starts its goroutines as go host.Contain(loop).
	Contain(f func())
	// Plugins are the broker's plugins (server.Config.Plugins), to find
	// another plugin's capability with Find or All.
	Plugins() []any
}
