// Package mirrorapi is the broker's side of the mirror APIs (keys
// 94–105) and of the MIRROR config resource: who may call each
// (Authorized, CLUSTER_ACTION for the inter-broker ones), what each
// request asks of the mirror plugin and how its answer is built. The
// work behind each key is the plugin's, which it reaches through
// Backend, so that it does not import the plugin.
package mirrorapi

import (
	"context"
	"time"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Backend is what the mirror APIs ask of the mirror plugin: one method
// per thing a key does.
type Backend interface {
	// CreateMirror is CreateMirror.
	CreateMirror(ctx context.Context, req *mirrorproto.CreateMirrorRequest) error
	// AddTopics is AddTopicsToMirror: the topic ID of the first topic
	// added and what truncation will remove from topics that exist here.
	AddTopics(ctx context.Context, req *mirrorproto.AddTopicsToMirrorRequest) (uuid.UUID, []mirrorproto.Truncation, error)
	// RemoveTopics is RemoveTopicsFromMirror (a failover): the topics
	// removed and the report of each partition.
	RemoveTopics(ctx context.Context, mirror string, topics []string, mode int8, timeout time.Duration, consistent bool) ([]string, []mirrorproto.FailoverPartition, error)
	// LastMirrored is LastMirroredOffsets.
	LastMirrored(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.LastMirroredOffsetsRequest) []mirrorproto.OffsetsTopic
	// Mirrors is the latest image, caught up with the controller's when
	// it lacks one of names (or names is empty).
	Mirrors(ctx context.Context, names ...string) *metadata.Image
	// Describe is DescribeMirrors.
	Describe(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.DescribeMirrorsRequest) []mirrorproto.DescribedMirror
	// ReadStates is ReadMirrorStates, on the coordinator.
	ReadStates(ctx context.Context, req *mirrorproto.ReadMirrorStatesRequest) ([]mirrorproto.StatesTopic, []mirrorproto.ShardMark, int16)
	// WriteStates is WriteMirrorStates, on the coordinator.
	WriteStates(ctx context.Context, req *mirrorproto.WriteMirrorStatesRequest) []mirrorproto.ErrTopic
	// Pause pauses (or resumes) topics of a mirror.
	Pause(ctx context.Context, mirror string, topics []string, pause bool) error
	// DeleteMirror stops every topic of a mirror and deletes it.
	DeleteMirror(ctx context.Context, mirror string) error
	// BumpLeaderEpoch is BumpLeaderEpochs for one partition: the epoch
	// it has now.
	BumpLeaderEpoch(ctx context.Context, id uuid.UUID, partition, minEpoch int32) (int32, error)
	// CheckConfigs refuses a mirror's configs that are not valid.
	CheckConfigs(configs map[string]string) error
	// AlterConfigs sets a mirror's configs.
	AlterConfigs(ctx context.Context, mirror string, configs map[string]string) error
	// RequestTimeout is mirror.request.timeout.ms, the timeout of a
	// failover that names none.
	RequestTimeout() time.Duration
}

// Handler serves the mirror APIs and the MIRROR config resource: a
// plugin.APIHandler and plugin.ConfigResourceHandler.
type Handler struct{ b Backend }

var (
	_ plugin.APIHandler            = (*Handler)(nil)
	_ plugin.ConfigResourceHandler = (*Handler)(nil)
)

// New returns the handler of the mirror APIs over b.
func New(b Backend) *Handler { return &Handler{b: b} }

// code is err's Kafka error code (plugin.ErrorCode), 0 for nil, and its
// message.
func code(err error) (int16, string) {
	if err == nil {
		return 0, ""
	}
	return plugin.ErrorCode(err), err.Error()
}
