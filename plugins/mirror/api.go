package mirror

import (
	"context"
	"time"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The mirror APIs of KIP-1279 (Cluster Mirroring), keys 94–105, are
// served by mirrorapi, which reaches the plugin through apiBackend. The
// work behind each key is in the file named for it (api_<key>.go;
// AddTopicsToMirror in add.go, RemoveTopicsFromMirror in failover.go);
// ListMirrors needs only the image (Mirrors); ReadMirrorStates and
// WriteMirrorStates are the state store's (statestore.ServeRead,
// ServeWrite).

// apiBackend is the plugin as the mirror APIs see it (mirrorapi.Backend).
type apiBackend struct{ *Plugin }

func (b apiBackend) CreateMirror(ctx context.Context, req *mirrorproto.CreateMirrorRequest) error {
	return b.createMirror(ctx, req)
}

func (b apiBackend) AddTopics(ctx context.Context, req *mirrorproto.AddTopicsToMirrorRequest) (uuid.UUID, []mirrorproto.Truncation, error) {
	return b.addTopics(ctx, req)
}

func (b apiBackend) RemoveTopics(ctx context.Context, mirror string, topics []string, mode int8, timeout time.Duration, consistent bool) ([]string, []mirrorproto.FailoverPartition, error) {
	return b.removeTopics(ctx, mirror, topics, mode, timeout, consistent)
}

func (b apiBackend) LastMirrored(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.LastMirroredOffsetsRequest) []mirrorproto.OffsetsTopic {
	return b.lastMirrored(ctx, rc, req)
}

func (b apiBackend) Mirrors(ctx context.Context, names ...string) *metadata.Image {
	return b.awaitMirrors(ctx, names...)
}

func (b apiBackend) Describe(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.DescribeMirrorsRequest) []mirrorproto.DescribedMirror {
	return b.describe(ctx, rc, req, b.describedImage(ctx, req))
}

func (b apiBackend) ReadStates(ctx context.Context, req *mirrorproto.ReadMirrorStatesRequest) ([]mirrorproto.StatesTopic, []mirrorproto.ShardMark, int16) {
	return b.store.ServeRead(ctx, b.awaitMirrors(ctx, req.MirrorName), req)
}

func (b apiBackend) WriteStates(ctx context.Context, req *mirrorproto.WriteMirrorStatesRequest) []mirrorproto.ErrTopic {
	return b.store.ServeWrite(ctx, req)
}

func (b apiBackend) Pause(ctx context.Context, mirror string, topics []string, pause bool) error {
	return b.pause(ctx, mirror, topics, pause)
}

func (b apiBackend) DeleteMirror(ctx context.Context, mirror string) error {
	return b.deleteMirror(ctx, mirror)
}

func (b apiBackend) BumpLeaderEpoch(ctx context.Context, id uuid.UUID, partition, minEpoch int32) (int32, error) {
	return b.bumpLeaderEpoch(ctx, id, partition, minEpoch)
}

func (b apiBackend) CheckConfigs(configs map[string]string) error {
	_, err := clientOpts(configs, b.cfg)
	return err
}

func (b apiBackend) AlterConfigs(ctx context.Context, mirror string, configs map[string]string) error {
	return b.Host().Metadata().AlterMirrorConfigs(ctx, mirror, configs)
}

func (b apiBackend) RequestTimeout() time.Duration { return b.cfg.RequestTimeout }
