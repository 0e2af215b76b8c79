package mirror

import (
	"context"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// BumpLeaderEpochs (key 105) of KIP-1279 (Cluster Mirroring): the
// plugin's side.

// bumpLeaderEpoch is BumpLeaderEpochs: the controller sets the epoch to
// max(minEpoch+1, current).
func (p *Plugin) bumpLeaderEpoch(ctx context.Context, id uuid.UUID, partition, minEpoch int32) (int32, error) {
	epochs, err := p.Host().Metadata().BumpLeaderEpochs(ctx, id, map[int32]int32{partition: minEpoch})
	return epochs[partition], err
}
