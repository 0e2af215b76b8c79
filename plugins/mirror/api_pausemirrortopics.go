package mirror

import (
	"context"
	"fmt"

	"github.com/tandem-kafka/tandem/plugins/mirror/admit"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// PauseMirrorTopics and ResumeMirrorTopics (keys 102 and 103) of KIP-1279
// (Cluster Mirroring): the plugin's side.

// pause pauses (or resumes) topics of a mirror; it answers once paused.
func (p *Plugin) pause(ctx context.Context, mirror string, names []string, pause bool) error {
	m := p.awaitMirrors(ctx, mirror).Mirrors[mirror]
	if m == nil {
		return fmt.Errorf("mirror %s does not exist: %w", mirror, mirrorproto.ErrMirrorNotFound)
	}
	topics, err := admit.Select(m, names)
	if err != nil {
		return err
	}
	err = p.setTopicStates(ctx, mirror, topics, func(s *mirrorstate.PartitionState) error {
		switch {
		case pause && s.State != mirrorstate.Paused:
			s.State = mirrorstate.Pausing
		case !pause && s.State == mirrorstate.Failed:
			s.State, s.Reason = mirrorstate.Preparing, "" // resuming restarts a failed partition
		case !pause && s.State == mirrorstate.Paused:
			s.State = mirrorstate.Mirroring
		}
		return nil
	})
	if err != nil || !pause {
		return err
	}
	return p.waitStates(ctx, mirror, topics, mirrorstate.Paused)
}
