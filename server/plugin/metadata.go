package plugin

import (
	"context"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Metadata is what a plugin may use of the metadata quorum
// (raftmeta.Controller implements it, as package server asserts: this
// package does not import the raft quorum): the images, and the
// decisions plugins ask the controller for, each group a small
// interface of its own, so that a plugin's code (and a test's fake) can
// name only the group it uses.
type Metadata interface {
	Images
	TopicDecisions
	MirrorDecisions
	SecurityDecisions
	ProducerIDDecisions
}

// Images are the committed metadata images.
type Images interface {
	// Image is the latest committed image; never nil, never modified.
	Image() *metadata.Image
	// Watch is the latest image and a channel closed when a newer one
	// is published, as one consistent pair.
	Watch() (*metadata.Image, <-chan struct{})
	// CatchUp waits until Image holds every change the active
	// controller had made when it was called.
	CatchUp(ctx context.Context) error
}

// TopicDecisions create and change topics.
type TopicDecisions interface {
	CreateTopics(ctx context.Context, specs []metadata.TopicSpec, validateOnly bool) []error
	CreatePartitions(ctx context.Context, name string, total int32, validateOnly bool) error
	AlterConfigs(ctx context.Context, changes []metadata.ConfigChange) error
	// BumpLeaderEpochs raises the leader epoch of each partition of
	// minEpochs to at least its minEpoch+1 (KIP-1279), in one batch, and
	// returns each one's epoch after.
	BumpLeaderEpochs(ctx context.Context, id metadata.UUID, minEpochs map[int32]int32) (map[int32]int32, error)
}

// MirrorDecisions define mirrors and their topics (KIP-1279).
type MirrorDecisions interface {
	CreateMirror(ctx context.Context, name string, configs map[string]string) error
	AlterMirrorConfigs(ctx context.Context, name string, configs map[string]string) error
	DeleteMirror(ctx context.Context, name string) error
	AddMirrorTopics(ctx context.Context, mirror string, specs []metadata.TopicSpec) error
	StopMirrorTopic(ctx context.Context, mirror, topic string) error
	SetMirrorSync(ctx context.Context, mirror, sourceClusterID string, managed []metadata.ACL) error
}

// SecurityDecisions change ACLs, SCRAM credentials and client quotas.
type SecurityDecisions interface {
	CreateACLs(ctx context.Context, acls []metadata.ACL) error
	DeleteACLs(ctx context.Context, filters []metadata.ACLFilter) ([][]metadata.ACL, error)
	AlterScram(ctx context.Context, changes []metadata.ScramChange) error
	AlterClientQuotas(ctx context.Context, changes []metadata.ClientQuotaRecord) error
}

// ProducerIDDecisions hand out blocks of producer IDs.
type ProducerIDDecisions interface {
	AllocateProducerIDs(ctx context.Context, count int64) (int64, error)
}
