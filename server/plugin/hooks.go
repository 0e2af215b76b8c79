package plugin

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// The hooks the broker calls, each with what calls it, whether it may
// block and what has happened before the first call. A plugin implements
// any of them; see the package documentation for the order.

// Lifecycle plugins are started before anything else calls them and
// stopped after everything else has.
//
// Start is called once, on the goroutine of server.Broker.Start, after
// the engine and the metadata quorum are open and before any leadership
// is reported or any request is served. Its ctx is Broker.Start's: it
// bounds Start, not the plugin's life, so a plugin that works in the
// background keeps a context of its own for that. An error fails
// Broker.Start, which then stops the plugins started before.
//
// Stop is called once, if Start succeeded, on the goroutine of
// server.Broker.Close, after the listeners closed and every request and
// observer call returned; the engine and the quorum are still open. It
// returns once every goroutine the plugin started has ended.
type Lifecycle interface {
	Start(ctx context.Context, host Host) error
	Stop(ctx context.Context) error
}

// LeaderChange says this broker gained or lost leadership of a partition.
type LeaderChange struct {
	Topic       string
	TopicID     engine.TopicID
	Partition   int32
	Leader      bool  // true: this broker now leads the partition
	LeaderEpoch int32 // the epoch of the new leadership (or of the one lost)
}

// LeaderObserver is told of leadership changes of this broker's
// partitions. Treat each call as the partition's current state, not as an
// event to count: coordinators load or drop their state, fetchers start
// or stop.
//
// OnLeaderChange is called on the broker's metadata goroutine, one call
// at a time, so calls are ordered per partition (and overall). When
// leadership is gained the partition exists in the engine with the
// leader epoch set; when it is lost because the topic was deleted, the
// partition is deleted right after. The first calls come once every
// plugin has started: one per partition the broker leads. It must not
// block, since every metadata change of the broker waits for it: hand
// slow work to a goroutine of the plugin (coord.Runtime.SetLeader loads
// a shard in the background).
type LeaderObserver interface {
	OnLeaderChange(change LeaderChange)
}

// MetadataObserver follows the metadata image.
//
// OnMetadataUpdate is called after the broker applied a new image (its
// partitions exist in the engine), from a goroutine of the observer's
// own, one call at a time, never from inside the raft FSM. The first
// call, once every plugin has started, carries the delta from the empty
// image. It may block without stalling the broker: its updates queue,
// and when 64 are pending they are coalesced into one delta from the
// oldest undelivered image to the newest. Close waits for the call in
// progress.
type MetadataObserver interface {
	OnMetadataUpdate(delta metadata.Delta, image *metadata.Image)
}

// AppendValidator is the engine's hook (engine.AppendValidator):
// ValidateAppend is called synchronously on the appending goroutine
// before batches enter a log, with no I/O. A non-nil error (ideally
// wrapping a *kerr.Error) rejects the whole append and leaves the log
// untouched. req.Origin says who appends. It must not block: every
// append of the broker waits for it.
type AppendValidator = engine.AppendValidator

// AppendObserver is the engine's hook (engine.AppendObserver): OnAppend is
// called after an append is durable and covered by the high watermark,
// on the goroutine that completes it. It must not block.
type AppendObserver = engine.AppendObserver

// PropsOwner plugins read broker properties of their own (mirror.*,
// transaction.*, offsets.*, group.*, ...). server.New asks OwnsProp to
// know which keys are a plugin's: those are not logged as unknown, and a
// plugin namespace's key that no plugin owns makes server.New fail.
type PropsOwner interface {
	OwnsProp(key string) bool
}

// APIHandler plugins serve API keys the broker itself does not: consumer
// groups, ACLs, the mirror APIs. APIs lists them, each key with its
// versions beside its handler (API, made by Handle or Answer), in the
// order ApiVersions advertises them; the broker registers them in the
// same table as its own keys and dispatches each request to its key's
// Handle, with the same conventions as its own handlers: the response's
// version is the request's, a nil response sends nothing, and an error
// closes the connection.
//
// APIs is called once, by server.New. An API's NewRequest is called on a
// connection's reading goroutine for every request of its key. Its
// Handle is called on the connection's goroutine, one request of a
// connection at a time and in order, concurrently for different
// connections, only between the plugins' Start and Stop. It may block
// until ctx ends, which happens when the client hangs up or the broker
// closes.
type APIHandler interface {
	APIs() []API
}

// ConfigResourceHandler plugins serve DescribeConfigs and
// IncrementalAlterConfigs for a config resource type the broker does not
// know itself (the mirror plugin: MIRROR, 64). The broker calls them on
// connection goroutines, as an APIHandler's API.Handle. Errors wrap kerr
// codes.
type ConfigResourceHandler interface {
	ConfigResourceType() kmsg.ConfigResourceType
	DescribeConfigResource(ctx context.Context, rc *RequestContext, name string, keys []string) ([]kmsg.DescribeConfigsResponseResourceConfig, error)
	AlterConfigResource(ctx context.Context, rc *RequestContext, name string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) error
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
// serve keyType), creating the topic on first use (Host.EnsureTopic).
// FindCoordinator is advertised only when some plugin implements this.
// server.New asks whether a plugin is one; LocateCoordinator is called on
// connection goroutines, concurrently, and must not block. Coordinator
// implements it.
type CoordinatorLocator interface {
	LocateCoordinator(keyType int8, key string) (topic InternalTopic, partition int32, ok bool)
}

// CoordinatorAuthorizer is implemented by CoordinatorLocator plugins that
// decide who may find their coordinators: FindCoordinator for their key
// type is authorized as their own APIs are (the mirror plugin: DESCRIBE on
// the MIRROR). The broker checks groups and transactional ids itself; a
// locator of another key type without it serves FindCoordinator only to
// principals allowed CLUSTER_ACTION, as inter-broker requests. It is
// called on connection goroutines, concurrently, and must not block.
// Errors wrap kerr codes.
type CoordinatorAuthorizer interface {
	AuthorizeCoordinator(rc *RequestContext, keyType int8, key string) error
}

// TxnCoordinator is the transactions plugin. InitProducerId with a
// transactional id goes to it; Produce asks it whether a transactional
// batch's partition is part of the producer's transaction (KIP-890's
// verification) before appending the first batch of a transaction. Both
// are called on connection goroutines and may block until ctx ends.
// Errors wrap kerr codes.
type TxnCoordinator interface {
	InitTransactionalProducerID(ctx context.Context, rc *RequestContext, req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse
	VerifyTxnPartition(ctx context.Context, txnID string, pid int64, epoch int16, tp TopicPartition) error
}

// TxnPartitionAdder is a TxnCoordinator that serves transaction.version 2
// (KIP-890 part 2); the broker then finalizes that feature. Produce v12+
// (the broker) and TxnOffsetCommit v5+ (the consumer-groups plugin, which
// finds it with Find) of a transactional producer call it to add their
// partition to the producer's transaction (starting one), which
// AddPartitionsToTxn and AddOffsetsToTxn did before. It may block until
// ctx ends. Errors wrap kerr codes: INVALID_PRODUCER_EPOCH for a fenced
// producer.
type TxnPartitionAdder interface {
	AddTxnPartition(ctx context.Context, txnID string, pid int64, epoch int16, tp TopicPartition) error
}

// Authorizer decides whether the principal of a request may perform an
// operation on a resource, with Apache Kafka's semantics (ACL resource
// types and operations as kmsg numbers them). The security plugin offers
// one (found in Config.Plugins); without one every request is allowed.
// Handlers call it through RequestContext.Allowed on connection
// goroutines, concurrently and for nearly every request: it must not
// block or do I/O.
type Authorizer interface {
	Authorize(rc *RequestContext, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool
}

// AnyAuthorizer is an Authorizer that can also answer Kafka's
// authorizeByResourceType: may the principal perform op on at least one
// resource of the type (KIP-679: an idempotent producer needs WRITE on
// some topic)? Same rules as Authorize.
type AnyAuthorizer interface {
	AuthorizeAny(rc *RequestContext, op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool
}

// ACLResourceMirror is the ACL resource type of KIP-1279's mirrors
// (operations on a named mirror: CREATE, DESCRIBE, ALTER, DELETE). Kafka
// has not numbered it; Tandem uses 8, the next code after USER (7).
const ACLResourceMirror kmsg.ACLResourceType = 8

// ClusterResource is the name of the one CLUSTER resource of ACLs.
const ClusterResource = "kafka-cluster"

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
// goroutines, concurrently; it must not block or do I/O. Errors wrap a
// kerr code.
type TopicGuard interface {
	CheckTopicChange(c TopicChange) error
}

// CheckTopicChange asks each TopicGuard among plugins (Config.Plugins, or
// Host.Plugins in a plugin); the first refusal wins.
func CheckTopicChange(plugins []any, c TopicChange) error {
	for _, g := range All[TopicGuard](plugins) {
		if err := g.CheckTopicChange(c); err != nil {
			return err
		}
	}
	return nil
}
