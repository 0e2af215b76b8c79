package mirror

import (
	"context"
	"fmt"

	"github.com/tandem-kafka/tandem/plugins/mirror/admit"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// DeleteMirror (key 104) of KIP-1279 (Cluster Mirroring): the plugin's side.

// deleteMirror stops every topic of the mirror and deletes it.
func (p *Plugin) deleteMirror(ctx context.Context, mirror string) error {
	m := p.awaitMirrors(ctx, mirror).Mirrors[mirror]
	if m == nil {
		return fmt.Errorf("mirror %s does not exist: %w", mirror, mirrorproto.ErrMirrorNotFound)
	}
	if topics, _ := admit.Select(m, nil); len(topics) > 0 {
		if _, _, err := p.removeTopics(ctx, mirror, topics, mirrorproto.FailoverNow, 0, false); err != nil {
			return err
		}
	}
	return p.Host().Metadata().DeleteMirror(ctx, mirror)
}
