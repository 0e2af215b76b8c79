package mirror

import (
	"context"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/metasync"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// The metadata sync (discovery, topic creation and growth, config,
// group offset, share group and ACL sync, the source cluster ID check)
// is metasync's. metasyncPlugin is the plugin as the sync sees it: the
// broker, the image and the coordinator routing come with the embedded
// Plugin (its plugin.Coordinator); the rest are the plugin's own methods,
// exported for the sync here rather than on Plugin.
type metasyncPlugin struct{ *Plugin }

var _ metasync.Plugin = metasyncPlugin{}

func (p metasyncPlugin) Started() context.Context { return p.started() }

func (p metasyncPlugin) ReadState(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	return p.store.Read(ctx, k, id)
}

func (p metasyncPlugin) SetTopicStates(ctx context.Context, mirror string, topics []string, update func(*mirrorstate.PartitionState) error) error {
	return p.setTopicStates(ctx, mirror, topics, update)
}

func (p metasyncPlugin) TopicRF(m *metadata.Mirror) int16 { return p.topicRF(m) }

func (p metasyncPlugin) Poke() { p.poke() }
